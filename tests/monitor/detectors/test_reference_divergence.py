"""Reference divergence: fires on a persistent train-loss gap beyond the between-run noise; silent on
seed noise, on timing early in training and on spikes both runs share; says when it cannot judge."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.quality.faults import train_every
from monitor.detectors.reference_divergence import ReferenceDivergence
from monitor.judging.align import align_pair
from monitor.schema import TRAIN_LOSS, Severity

from .synth import pair, run, train_loss


def test_fires_below_reference_with_direction_and_evidence():
    run, ref = pair(offset_from=3000, offset=-0.25)
    found = ReferenceDivergence().detect(run, ref)
    assert len(found) == 1
    d = found[0]
    assert d.detector == "reference_divergence" and d.metric == TRAIN_LOSS
    assert 3000 <= d.start_step <= 3300 and d.end_step >= 5900
    assert d.evidence["direction"] == "below" and d.evidence["delta"] < -0.2
    assert d.severity == Severity.CRITICAL  # 0.25 is many times the band of ~0.02
    assert {"delta", "delta_median", "band", "tau", "z", "p_value", "n"} <= set(d.evidence)
    assert d.evidence["tau"] > d.evidence["stderr"]  # the between-run term dominates a shared-order pair
    assert d.evidence["noise_correlation"] > 0.8  # same data order: the noise is shared
    assert d.reference == "reference" and "below the reference" in d.message


def test_fires_above_reference_with_severity_by_effect_over_band():
    run, ref = pair(offset_from=2000, offset=+0.04)
    (d,) = ReferenceDivergence().detect(run, ref)
    assert d.evidence["direction"] == "above" and d.severity == Severity.WARNING
    assert "learns slower" in d.message
    run, ref = pair(offset_from=2000, offset=+0.12)
    (d,) = ReferenceDivergence().detect(run, ref)
    assert d.severity == Severity.CRITICAL and d.score >= 3


def test_silent_on_seed_noise_same_and_other_data_order():
    for same in (True, False):
        run, ref = pair(same_order=same)
        assert ReferenceDivergence().detect(run, ref) == []


def test_silent_within_the_between_run_noise_even_when_the_window_error_is_tiny():
    # 0.015 nats is dozens of window standard errors with shared noise, but two seeds of one
    # recipe sit that far apart (0.2% of a loss of ~3.3, x3).
    run, ref = pair(offset_from=1000, offset=-0.015)
    (d,) = ReferenceDivergence(noise_level=0.0, noise_timing=0.0).detect(run, ref)
    assert abs(d.evidence["z"]) > 10
    assert ReferenceDivergence().detect(run, ref) == []


def test_shared_spikes_do_not_fire():
    run, ref = pair()
    for s in (919, 947, 2500):  # both runs spike at the same steps (same data order)
        run.scalars.loc[s, TRAIN_LOSS] += 1.3
        ref.scalars.loc[s, TRAIN_LOSS] += 1.1
    # a burst of spikes in one run only is not divergence either
    run.scalars.loc[4000:4010, TRAIN_LOSS] += 1.0
    assert ReferenceDivergence().detect(run, ref) == []


def test_needs_persistence():
    run, ref = pair()
    run.scalars.loc[3000:3150, TRAIN_LOSS] -= 0.3  # under two windows
    assert ReferenceDivergence().detect(run, ref) == []
    assert len(ReferenceDivergence(persist_windows=1).detect(run, ref)) == 1


def test_no_reference_no_overlap():
    run, ref = pair()
    assert ReferenceDivergence().detect(run, None) == []
    ref.scalars.index = ref.scalars.index + 100_000
    assert ReferenceDivergence().detect(run, ref) == []


def test_timing_differences_early_in_training_are_not_divergence():
    # The run reaches each loss 1% of steps later, early in training when the loss falls fast:
    # up to 0.04 nats apart, all of it timing (the between-run timing term).
    steps = np.arange(1, 4001)
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.02, steps.size)
    ref = run_of("reference", 3 + 10 * np.exp(-steps / 400) + noise)
    late = run_of("run", 3 + 10 * np.exp(-steps / 1.01 / 400) + noise + rng.normal(0, 0.005, steps.size))
    assert ReferenceDivergence(noise_timing=0.01).detect(late, ref) == []
    assert ReferenceDivergence(noise_timing=0.0).detect(late, ref) != []


def test_says_what_it_cannot_judge():
    run, ref = pair(n_steps=250)
    assert ReferenceDivergence().detect(run, ref) == []
    (why,) = ReferenceDivergence().not_judged(run, ref)
    assert "complete window" in why.reason and why.needs and why.metric == TRAIN_LOSS
    short, _ = pair(n_steps=20)
    (why,) = ReferenceDivergence().not_judged(short, ref)
    assert "logging interval" in why.reason and why.needs == "12 more logged steps"
    long_run, long_ref = pair()
    assert ReferenceDivergence().not_judged(long_run, long_ref) == []


def test_only_complete_windows_are_judged():
    # A divergence in the last, still growing window is not judged until the window is complete.
    run, ref = pair(n_steps=6050)
    run.scalars.loc[5700:, TRAIN_LOSS] += 0.3
    found = ReferenceDivergence().detect(run, ref)
    assert found and found[0].end_step <= 5999
    ends = ReferenceDivergence().windows(run, ref)
    assert not ends["complete"].iloc[-1] and ends["complete"].iloc[-2]


def run_of(name, loss):
    return run(name, pd.DataFrame({TRAIN_LOSS: loss}, index=np.arange(1, loss.size + 1)))


def test_a_run_logged_every_250_steps_as_a_mean_is_judged_in_windows_of_eight_values():
    """Hugging Face Trainer logs the mean loss every `logging_steps` (500 by default), nanoGPT an
    estimate at each evaluation: in windows of 100 logged values such a run would never have the
    three complete windows a verdict needs."""
    det = ReferenceDivergence()
    clean = [train_every(x, 250) for x in pair(n_steps=20_000, same_order=False)]
    assert det.width(clean[0]) == 8 * 250
    assert det.detect(*clean) == [] and det.not_judged(*clean) == []
    worse = [train_every(x, 250) for x in pair(n_steps=20_000, offset_from=8000, offset=0.05, same_order=False)]
    (d,) = det.detect(*worse)
    assert d.evidence["direction"] == "above" and d.start_step >= 8000
    # A run logged every step keeps its windows of 100 steps.
    assert det.width(pair()[0]) == 100


def logged(name, first, last):
    steps = np.arange(first, last + 1)
    return run(name, pd.DataFrame({TRAIN_LOSS: train_loss(steps, seed=1)}, index=steps))


def test_a_pair_logged_at_no_common_step_is_not_a_reference_without_train_loss():
    # Aligned, train loss that pairs at no step leaves the reference's frame: the reference did
    # log it, at steps 1-900, before the run began.
    mine = logged("run", 1000, 3000)
    (why,) = ReferenceDivergence().not_judged(mine, align_pair(mine, logged("reference", 1, 900))[1])
    assert why.reason == ("the runs logged train/loss at no common step: the run at steps 1,000–3,000, the "
                          "reference at steps 1–900")


def test_the_steps_past_a_reference_that_stopped_are_said_not_judged():
    mine = logged("run", 1, 3000)
    (why,) = ReferenceDivergence().not_judged(mine, align_pair(mine, logged("reference", 1, 900))[1])
    assert why.reason == "on steps 901–3,000: the reference stops at step 900" and why.metric == TRAIN_LOSS
    # A run that ends first is still going: judged up to its last step, nothing left out.
    short = logged("run", 1, 900)
    assert ReferenceDivergence().not_judged(short, align_pair(short, logged("reference", 1, 3000))[1]) == []
    # Less than a window past the reference's end would be an incomplete window anyway.
    near = logged("run", 1, 3050)
    assert ReferenceDivergence().not_judged(near, align_pair(near, logged("reference", 1, 3000))[1]) == []
