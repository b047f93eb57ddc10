"""Spikes: OLMo-core's rule reproduced exactly, the OLMo 2 rule, and ours, which finds what those
miss (spikes on a steep early descent, a spike right after another) without firing on noise."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from monitor.detectors.spike import SpikeDetector, olmo2_flags, olmo_core_flags
from monitor.schema import SPIKE_SCORE_GRAD_NORM, SPIKE_SCORE_LOSS, TRAIN_GRAD_NORM, TRAIN_LOSS, Severity

from .synth import ar1, grad_norm, loss_curve, run


def callback_rule(values, window=128, threshold=6.0):
    """OLMo-core StabilityMonitorCallback's per-step rule, step by step as the callback runs it."""
    history, flags = [], []
    for v in values:
        spike = False
        if len(history) >= window:
            mean = sum(history) / len(history)
            std = math.sqrt(sum((x - mean) ** 2 for x in history) / len(history))
            spike = std >= 1e-10 and v > mean + threshold * std
        flags.append(spike)
        history.append(v)
        if len(history) > window:
            history.pop(0)
    return np.array(flags)


def clean_loss(n=3000, seed=0, sigma=0.03):
    steps = np.arange(n)
    return pd.Series(loss_curve(steps) + ar1(n, sigma, 0.3, np.random.default_rng(seed)), index=steps)


def test_olmo_core_rule_matches_the_callback_step_by_step():
    x = clean_loss(1500)
    x.iloc[[400, 410, 900]] += [0.8, 0.5, 1.5]
    assert np.array_equal(olmo_core_flags(x), callback_rule(x.tolist()))
    assert olmo_core_flags(x)[900]


def test_olmo2_rule_is_two_sided_over_1000_steps():
    x = clean_loss(2500)
    x.iloc[1500] += 2.0
    x.iloc[2000] -= 2.0
    flags = olmo2_flags(x)
    assert flags[1500] and flags[2000] and flags[:1000].sum() == 0


def test_fires_on_injected_loss_spikes_and_reports_severity():
    x = clean_loss(4000)
    x.iloc[1500] += 0.6
    x.iloc[2500:2540] += 0.5  # slow recovery
    x.iloc[3500:] += 0.8  # never recovers
    found = SpikeDetector(metrics=(TRAIN_LOSS,)).detect(run("r", x.to_frame(TRAIN_LOSS)))
    by_step = {d.start_step: d for d in found}
    assert set(by_step) == {1500, 2500, 3500}
    assert by_step[1500].severity == Severity.INFO and by_step[1500].end_step == 1500
    assert by_step[2500].severity == Severity.WARNING and by_step[2500].end_step == 2539
    assert by_step[3500].severity == Severity.CRITICAL and not by_step[3500].evidence["recovered"]
    assert by_step[1500].evidence["z"] > 6 and by_step[1500].evidence["olmo_core_flag"] is not None


def test_silent_on_clean_noisy_runs():
    for seed in range(5):
        frame = pd.DataFrame({TRAIN_LOSS: clean_loss(5000, seed).to_numpy(),
                              TRAIN_GRAD_NORM: grad_norm(np.arange(5000), seed)})
        assert SpikeDetector().detect(run("clean", frame)) == []


def test_grad_norm_spikes_judged_multiplicatively():
    steps = np.arange(3000)
    g = pd.Series(grad_norm(steps, 3), index=steps)
    g.iloc[2000] *= 5
    g.iloc[2500] *= 1.2  # a wobble, not a spike
    (d,) = SpikeDetector(metrics=(TRAIN_GRAD_NORM,)).detect(run("r", g.to_frame(TRAIN_GRAD_NORM)))
    assert d.peak_step == 2000 and 4 < d.evidence["ratio"] < 6 and d.evidence["scale"] == "log"


def test_finds_a_spike_on_a_steep_descent_that_olmo_core_misses():
    # Early training: the loss falls ~1 nat over the 128-step window, which inflates the
    # window's standard deviation far beyond the step-to-step noise.
    steps = np.arange(1200)
    x = pd.Series(3 + 8 * np.exp(-steps / 250) + ar1(1200, 0.02, 0.3, np.random.default_rng(1)), index=steps)
    x.iloc[300] += 0.6  # 30 sigma of noise, a quarter of OLMo-core's trend-inflated threshold
    assert not olmo_core_flags(x)[300]
    (d,) = SpikeDetector(metrics=(TRAIN_LOSS,)).detect(run("r", x.to_frame(TRAIN_LOSS)))
    assert d.start_step == 300 and not d.evidence["olmo_core_flag"]


def test_a_spike_does_not_mask_the_next_one():
    x = clean_loss(2000, 2)
    x.iloc[1000] += 2.0
    x.iloc[1030] += 0.5  # OLMo-core's window now holds the first spike: its sigma is 6x too big
    assert olmo_core_flags(x)[1000] and not olmo_core_flags(x)[1030]
    found = SpikeDetector(metrics=(TRAIN_LOSS,)).detect(run("r", x.to_frame(TRAIN_LOSS)))
    assert [d.start_step for d in found] == [1000, 1030]


def test_definition_can_be_olmo_core_or_olmo2():
    x = clean_loss(3000)
    x.iloc[2000] += 3.0
    for definition in ("olmo_core", "olmo2"):
        found = SpikeDetector(metrics=(TRAIN_LOSS,), definition=definition).detect(run("r", x.to_frame(TRAIN_LOSS)))
        assert [d.start_step for d in found] == [2000]


def test_spike_score_series_is_the_share_of_spiky_steps():
    x = clean_loss(3000)
    spikes = [500, 900, 1300, 1700]
    x.iloc[spikes] += 1.0
    det = SpikeDetector(score_window=1000)
    frame = pd.DataFrame({TRAIN_LOSS: x.to_numpy(), TRAIN_GRAD_NORM: grad_norm(np.arange(3000), 0)})
    series = det.score_series(run("r", frame))
    loss = series[series["key"] == SPIKE_SCORE_LOSS].set_index("step")["value"]
    assert set(series["key"]) == {SPIKE_SCORE_LOSS, SPIKE_SCORE_GRAD_NORM}
    # the window ending at 1499 holds steps 500..1499: three spikes
    assert loss.loc[1499] == 3 / 1000 and loss.loc[1999] == 2 / 1000
    assert loss.loc[2999] == 0.0 and loss.loc[499] == 0.0
    # Nothing before the rule's first verdict: a score of 0 there would read as calm.
    assert loss.index.min() == det.first_verdict_points()
    short = det.score_series(run("r", frame.iloc[:det.first_verdict_points()]))
    assert short.empty
    last = SpikeDetector(score_window=1000).detect(run("r", frame))[-1]
    assert last.peak_step == 1700 and last.evidence["spike_score"] == 3 / 1000


def test_rejects_unknown_definition():
    try:
        SpikeDetector(definition="mine")
    except ValueError as exc:
        assert "olmo_core" in str(exc)
    else:
        raise AssertionError("an unknown definition must be refused")


def test_a_run_of_one_value_is_not_judged_in_the_singular():
    detector = SpikeDetector(metrics=(TRAIN_LOSS,))
    need = detector.first_verdict_points() + 1
    (one,) = detector.not_judged(run("one", pd.DataFrame({TRAIN_LOSS: [3.0]}, index=[1])))
    assert one.reason.startswith("only 1 logged value; ")
    (short,) = detector.not_judged(run("short", pd.DataFrame({TRAIN_LOSS: np.full(need - 1, 3.0)},
                                                             index=np.arange(1, need))))
    assert short.reason.startswith(f"only {need - 1} logged values; ") and short.needs == "1 more logged step"


def test_a_loss_that_jumped_and_stays_up_is_one_excursion_that_goes_on():
    # A persistent jump is not "resolved" because the level caught up with it: its excursion lasts
    # while the loss stays above the level before it, and its size is against that level.
    x = clean_loss(3000)
    x.iloc[2000:] += 0.5
    (jump,) = SpikeDetector(metrics=(TRAIN_LOSS,)).detect(run("r", x.to_frame(TRAIN_LOSS)))
    assert (jump.start_step, jump.end_step, jump.severity) == (2000, 2999, Severity.CRITICAL)
    assert jump.message.endswith("not recovered after 1,000 steps") and jump.evidence["z"] > 6
    # Back at its level after 300 values: CRITICAL still (it was, while up), ended where it came back.
    x.iloc[2300:] -= 0.5
    (back,) = SpikeDetector(metrics=(TRAIN_LOSS,)).detect(run("r", x.to_frame(TRAIN_LOSS)))
    assert (back.start_step, back.end_step, back.severity) == (2000, 2299, Severity.CRITICAL)
    assert back.message.endswith("recovered after 300 steps") and back.evidence["recovered"]
