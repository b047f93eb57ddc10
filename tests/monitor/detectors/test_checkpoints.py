"""The held-out pairing's measurement error where every pair is interpolated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from monitor.detectors.checkpoints import (
    D2_MEDIAN_FACTOR,
    NOISE_WINDOW,
    eval_set_offset,
    measurement_error,
    pair_series,
)

# Interpolation errors as the model gives them along a run paired only by interpolation: large
# where the early curve bends, small later.
INTERP = np.array([0.02, 0.014, 0.009, 0.006, 0.004, 0.003, 0.0025, 0.002])
EVAL_NOISE = 0.001


def interpolated_pairs(delta: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"step": np.arange(1, delta.size + 1) * 250, "run": 3.0, "reference": 3.0,
                         "delta": delta, "interp_error": INTERP, "exact": False, "logged_se": np.nan})


def test_interpolation_errors_are_not_counted_twice():
    """The second differences of interpolated pairs carry the interpolation errors; counted once in
    that scatter and again on their own, the last checkpoint's error came out 2.6 times the truth."""
    rng = np.random.default_rng(0)
    last = []
    for _ in range(300):
        delta = 0.004 + rng.normal(0, EVAL_NOISE, INTERP.size) + rng.normal(0, 1, INTERP.size) * INTERP
        last.append(measurement_error(interpolated_pairs(delta))[-1])
    last = np.array(last)
    truth = np.hypot(EVAL_NOISE, INTERP[-1])
    assert np.all(last >= INTERP[-1])  # never below the checkpoint's own interpolation error
    assert 0.85 <= np.median(last) / truth < 1.6
    # The variance is still overstated on average (six second differences cannot tell 0.001 of
    # eval noise from the interpolation errors), but by 3x, not the 6x that one median of all the
    # second differences against one median of their interpolation variances gave.
    assert np.mean((last / truth) ** 2) < 4.0


def test_an_early_wide_bracket_does_not_lend_its_error_to_later_checkpoints():
    """Held-out differences of two test-half repeats (r08 - r02) paired only by interpolation
    (offset cadence): every second difference lies within its own interpolation errors, so there is
    no eval noise to add. One median of the second differences against one median of their
    variances took the first, widest bracket's scatter for eval noise of 0.007, which doubled the
    last checkpoint's error."""
    delta = np.array([-0.0046, -0.0114, 0.0017, -0.0044, -0.0059])
    interp = np.array([0.0195, 0.0097, 0.0066, 0.0075, 0.005])
    pairs = pd.DataFrame({"step": [375, 625, 875, 1125, 1375], "run": 3.0, "reference": 3.0, "delta": delta,
                          "interp_error": interp, "exact": False, "logged_se": np.nan})
    se = measurement_error(pairs)
    assert se[-1] == pytest.approx(interp[-1], rel=0.05)
    assert se[-2] == pytest.approx(interp[-2], rel=0.05)


def test_the_median_factors_are_what_white_noise_gives():
    rng = np.random.default_rng(2)
    assert len(D2_MEDIAN_FACTOR) == NOISE_WINDOW - 2
    for n, factor in enumerate(D2_MEDIAN_FACTOR, start=1):
        x = rng.standard_normal((100_000, n + 2))
        d2 = x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]
        assert np.mean(np.median(d2 ** 2, axis=1)) / 6 == pytest.approx(factor, abs=0.01)


def test_the_error_is_unknown_before_four_pairs():
    se = measurement_error(interpolated_pairs(np.full(INTERP.size, 0.004)))
    assert np.isnan(se[:3]).all() and np.isfinite(se[3:]).all()


def test_a_logged_error_stands_in_only_until_the_curve_can_be_read():
    # Two runs scored on the same text: each states 0.004 against all held-out text, but their
    # difference wanders by 0.0005 from checkpoint to checkpoint.
    steps = np.arange(1, 13) * 250
    delta = 0.01 + np.random.default_rng(3).normal(0, 0.0005, steps.size)
    logged = np.hypot(0.004, 0.004)
    pairs = pd.DataFrame({"step": steps, "run": 3.0, "reference": 3.0, "delta": delta, "interp_error": 0.0,
                          "exact": True, "logged_se": logged})
    se = measurement_error(pairs)
    assert se[:3] == pytest.approx(logged)  # nothing to read yet: the stated error, not unknown
    assert (se[3:] < 0.002).all()  # then the curve's own, a quarter of what the two runs state
    assert eval_set_offset(pairs) == pytest.approx(logged)  # kept as the lasting offset's floor
    assert (eval_set_offset(pairs.assign(logged_se=np.nan)) == 0).all()


def _curve(steps: np.ndarray, offset: float = 0.0) -> pd.Series:
    """A held-out loss curve as two runs of one recipe share it: a power law in the step, and the
    bumps the same data order and eval set put into both (here a wave), which no interpolation
    through a few evaluations follows."""
    x = steps.astype(float)
    return pd.Series(2.8 + 6.0 * x ** -0.35 + 0.004 * np.sin(x / 400.0) + offset, index=steps)


def test_a_mirrored_difference_cancels_the_shape_two_runs_share():
    # Both runs evaluate every 500 steps, the reference half an interval later (the offset
    # cadence): interpolating the reference alone misses the true 0.01 by the bumps it steps over.
    run_steps, ref_steps = np.arange(500, 20001, 500), np.arange(750, 20001, 500)
    run, ref = _curve(run_steps, 0.01), _curve(ref_steps)
    plain, mirrored = pair_series(run, ref), pair_series(run, ref, mirrored=True)
    mirrored = mirrored[mirrored["step"] < 20000]  # past the reference's last evaluation (below)
    assert mirrored["mirrored"].all() and mirrored["step"].iloc[0] == 1000  # 500 precedes the reference
    late = plain["step"] > 2000
    one_sided = np.abs(plain["delta"][late] - 0.01)
    both = np.abs(mirrored["delta"][late] - 0.01)
    assert both.mean() < 0.6 * one_sided.mean() and both.max() < 0.6 * one_sided.max()
    assert (mirrored["interp_error"][late] < plain["interp_error"][late]).all()


def test_the_run_s_last_checkpoint_past_the_reference_s_last_evaluation_is_paired_by_its_mirror():
    # The run evaluates at its last step (20,000), the reference last at 19,750: nothing of the
    # reference is extrapolated, but the run interpolated at 19,750 pairs the final checkpoint.
    run_steps, ref_steps = np.arange(500, 20001, 500), np.arange(750, 20001, 500)
    run, ref = _curve(run_steps, 0.01), _curve(ref_steps)
    assert 20000 not in pair_series(run, ref)["step"].to_numpy()
    last = pair_series(run, ref, mirrored=True).iloc[-1]
    assert last["step"] == 20000 and not last["mirrored"] and not last["exact"]
    assert last["reference"] == ref.iloc[-1] and abs(last["delta"] - 0.01) < 1.96 * last["interp_error"]
    assert last["interp_error"] > 0
    # A run that goes on past its bracket holding that evaluation is not paired there.
    longer = _curve(np.arange(500, 21001, 500), 0.01)
    assert pair_series(longer, ref, mirrored=True)["step"].max() == 20000


def test_exact_pairs_and_brackets_without_a_reference_evaluation_are_not_mirrored():
    steps = np.arange(500, 10001, 500)
    exact = pair_series(_curve(steps, 0.01), _curve(steps), mirrored=True)
    assert not exact["mirrored"].any() and np.allclose(exact["delta"], 0.01)
    # The reference evaluates every second checkpoint of the run: its evaluations fall on the run's.
    sparse = pair_series(_curve(steps, 0.01), _curve(steps[1::2]), mirrored=True)
    assert not sparse["mirrored"].any()
    assert sparse.equals(pair_series(_curve(steps, 0.01), _curve(steps[1::2])).assign(mirrored=False))


def test_a_mirrored_difference_never_changes_as_the_run_goes_on():
    # What the watch service judges at a checkpoint must be what a whole-run pass judges there.
    run_steps, ref_steps = np.arange(500, 20001, 500), np.arange(750, 20001, 500)
    rng = np.random.default_rng(0)
    run = _curve(run_steps) + rng.normal(0, 0.002, run_steps.size)
    ref = _curve(ref_steps)
    whole = pair_series(run, ref, mirrored=True).set_index("step")["delta"]
    for upto in (3000, 7500, 12000):
        part = pair_series(run[run.index <= upto], ref, mirrored=True).set_index("step")["delta"]
        pd.testing.assert_series_equal(part, whole.loc[part.index])
