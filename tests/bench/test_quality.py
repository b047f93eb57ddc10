"""The detection-quality benchmark's fast subset (the whole table: `python -m bench quality`), and the
calibration it rests on: refitted on the calibration half, the constants must be the ones the code
uses, so nobody can tune a default without the benchmark saying so."""

from __future__ import annotations

import pytest

from bench.quality import calibrate, cases, corpus, faults
from monitor.detectors.checkpoints import (
    INTERP_ERROR_CORRELATION,
    INTERP_ERROR_SCALE,
    MIRROR_ERROR_CORRELATION,
    MIRROR_ERROR_SCALE,
    PAST_END_ERROR_SCALE,
)
from monitor.detectors.heldout_divergence import HeldoutDivergence
from monitor.detectors.memorization_trend import MemorizationTrend
from monitor.detectors.noise import FOLLOW_NOISE, HELDOUT_NOISE, TRAIN_NOISE


def test_the_code_uses_what_the_calibration_half_fits(shared_data):
    fit = calibrate.calibrate("calibration")
    for fitted, used in ((fit.train, TRAIN_NOISE), (fit.heldout, HELDOUT_NOISE), (fit.follow, FOLLOW_NOISE)):
        assert used.level == pytest.approx(fitted.level, rel=0.01, abs=1e-5)
        assert used.timing == pytest.approx(fitted.timing, rel=0.01, abs=1e-4)
    assert INTERP_ERROR_SCALE == pytest.approx(fit.interp_error_scale, abs=0.005)
    assert INTERP_ERROR_CORRELATION == pytest.approx(fit.interp_error_correlation, abs=0.01)
    assert MIRROR_ERROR_SCALE == pytest.approx(fit.mirror_error_scale, abs=0.005)
    assert PAST_END_ERROR_SCALE == pytest.approx(fit.past_end_error_scale, abs=0.005)
    # The pooled tests' model correlates every pair of checkpoints alike: a negative lag-one
    # correlation is taken as none.
    assert fit.mirror_error_correlation < 0 and MIRROR_ERROR_CORRELATION == 0.0
    assert HeldoutDivergence().min_relative_effect == pytest.approx(1.5 * fit.largest_single_set_share, abs=0.001)
    assert MemorizationTrend().min_effect == pytest.approx(1.5 * fit.largest_trend_residual, abs=0.001)


SUBSET = ("clean", "memorization 0.05", "memorization 0.1", "worse 0.06", "improvement 0.05")


@pytest.fixture(scope="module")
def outcomes(shared_data):
    """Two test-half pairs of repeats (both ways) and the OLMo 1B ladder pair, under every cadence."""
    pairs = [p for p in corpus.clean_pairs("test") if p[2] == "ladder"][:1]
    pairs += [p for p in corpus.clean_pairs("test") if {p[0].name, p[1].name} == {"r02", "r04"}]
    out = []
    for fault in cases.pair_faults():
        if fault.name not in SUBSET:
            continue
        for run, ref, family in pairs:
            for cadence in faults.CADENCE_NAMES:
                outcome = cases.judge_pair(fault, cadence, run, ref, family, "test")
                if outcome.applicable:
                    out.append(outcome)
    return out


@pytest.mark.slow
def test_no_alarm_on_clean_pairs_under_any_cadence(outcomes):
    clean = [o for o in outcomes if o.fault == "clean"]
    assert len(clean) == 3 * len(faults.CADENCE_NAMES)
    assert [(o.run, o.cadence, n) for o in clean for n, fired in o.fired.items() if fired] == []


def test_memorization_is_caught_under_every_cadence(outcomes):
    for gap in ("0.05", "0.1"):
        mine = [o for o in outcomes if o.fault == f"memorization {gap}"]
        missed = [(o.run, o.cadence) for o in mine if not o.fired["memorization"]]
        assert missed == [], gap


def test_a_worse_run_is_divergence_and_an_improvement_never_memorization(outcomes):
    worse = [o for o in outcomes if o.fault == "worse 0.06"]
    assert all(o.fired["reference_divergence"] or o.fired["heldout_divergence"] for o in worse)
    assert not any(o.fired["memorization"] for o in worse)
    better = [o for o in outcomes if o.fault == "improvement 0.05"]
    assert better and not any(o.fired["memorization"] or o.fired["memorization_trend"] for o in better)
