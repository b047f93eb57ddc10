"""Reference divergence: fires on a persistent, large train-loss gap; silent on seed noise and on
spikes both runs share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.detectors.reference_divergence import ReferenceDivergence
from monitor.schema import TRAIN_LOSS, Severity

from .synth import pair, run


def test_fires_below_reference_with_direction_and_evidence():
    run, ref = pair(offset_from=3000, offset=-0.25)
    found = ReferenceDivergence().detect(run, ref)
    assert len(found) == 1
    d = found[0]
    assert d.detector == "reference_divergence" and d.metric == TRAIN_LOSS
    assert 3000 <= d.start_step <= 3300 and d.end_step >= 5900
    assert d.evidence["direction"] == "below" and d.evidence["delta"] < -0.2
    assert d.severity == Severity.CRITICAL  # 0.25 is five times the 0.05 band
    assert {"delta", "band", "z", "p_value", "n"} <= set(d.evidence)
    assert d.evidence["noise_correlation"] > 0.8  # same data order: the noise is shared
    assert d.reference == "reference" and "below the reference" in d.message


def test_fires_above_reference():
    run, ref = pair(offset_from=2000, offset=+0.12)
    (d,) = ReferenceDivergence().detect(run, ref)
    assert d.evidence["direction"] == "above" and d.severity == Severity.WARNING


def test_silent_on_seed_noise_same_and_other_data_order():
    for same in (True, False):
        run, ref = pair(same_order=same)
        assert ReferenceDivergence().detect(run, ref) == []


def test_silent_below_min_effect_even_when_significant():
    # 0.03 nats is many standard errors with shared noise, but seeds differ that much.
    run, ref = pair(offset_from=1000, offset=-0.03)
    assert ReferenceDivergence().detect(run, ref) == []
    assert len(ReferenceDivergence(min_effect=0.01).detect(run, ref)) == 1


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


def test_timing_differences_within_the_shift_tolerance_are_not_divergence():
    # The run reaches each loss 4% of steps later, early in training when the loss falls fast:
    # up to 0.15 nats apart, all of it timing.
    steps = np.arange(1, 4001)
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.02, steps.size)
    ref = run_of("reference", 3 + 10 * np.exp(-steps / 400) + noise)
    late = run_of("run", 3 + 10 * np.exp(-steps / 1.04 / 400) + noise + rng.normal(0, 0.005, steps.size))
    assert ReferenceDivergence(step_shift_tolerance=0.05).detect(late, ref) == []
    assert ReferenceDivergence(step_shift_tolerance=0.0).detect(late, ref) != []


def run_of(name, loss):
    return run(name, pd.DataFrame({TRAIN_LOSS: loss}, index=np.arange(1, loss.size + 1)))
