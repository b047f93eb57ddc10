"""Held-out divergence per set at matching checkpoints, with and without standard errors."""

from __future__ import annotations

import numpy as np

from monitor.detectors.heldout_divergence import HeldoutDivergence
from monitor.schema import Severity, heldout_key

from .synth import pair

HELD = heldout_key("c4", "loss")


def test_fires_when_heldout_rises_above_reference():
    run, ref = pair(n_steps=8000, offset_from=4000, held_offset=+0.12)
    (d,) = HeldoutDivergence().detect(run, ref)
    assert d.metric == HELD and d.start_step >= 4000 and d.evidence["direction"] == "above"
    assert d.evidence["set"] == "c4" and np.isfinite(d.evidence["z"]) and d.evidence["p_value"] < 1e-6
    assert d.severity == Severity.WARNING and "generalises worse" in d.message


def test_silent_on_seed_noise_and_small_significant_gaps():
    run, ref = pair(n_steps=8000)
    assert HeldoutDivergence().detect(run, ref) == []
    run, ref = pair(n_steps=8000, offset_from=2000, held_offset=+0.03)  # significant, but seed-sized
    assert HeldoutDivergence().detect(run, ref) == []


def test_band_widens_with_large_standard_errors():
    run, ref = pair(n_steps=8000, offset_from=4000, held_offset=+0.12)
    for r in (run, ref):
        r.scalars[heldout_key("c4", "stderr")] = 0.05  # a tiny eval set
    assert HeldoutDivergence().detect(run, ref) == []


def test_without_standard_errors_the_effect_floor_decides():
    run, ref = pair(n_steps=8000, offset_from=4000, held_offset=+0.12)
    for r in (run, ref):
        r.scalars = r.scalars.drop(columns=[heldout_key("c4", "stderr")])
    (d,) = HeldoutDivergence().detect(run, ref)
    assert np.isnan(d.evidence["stderr"]) and d.evidence["band"] >= 0.05


def test_one_bad_checkpoint_is_not_enough():
    run, ref = pair(n_steps=8000)
    run.scalars.loc[3000, HELD] += 0.3
    assert HeldoutDivergence().detect(run, ref) == []
