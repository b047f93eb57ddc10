"""The judgments the detection-quality review found wrong on real runs, each on the runs it was found
on (test half of bench/quality/corpus.py: no threshold was fitted on these)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from bench.quality import corpus, faults
from monitor.judging.judge import DetectConfig, judge
from monitor.detectors.reference_divergence import ReferenceDivergence
from monitor.schema import HELDOUT_PREFIX, TRAIN_LOSS
from tests.monitor.detectors.synth import loss_curve, run


def detectors_that_fire(a, b, names=("reference_divergence", "heldout_divergence", "memorization")):
    found = judge(a, b, DetectConfig(detectors=list(names), write_series=False)).detections
    return {d.detector for d in found}


def test_memorization_is_judged_when_the_reference_evaluates_less_often(shared_data):
    run_, ref = corpus.repeats("test")[:2]
    faulty = faults.memorization(0.1)(run_)
    for cadence in ("ref 2x less", "ref 4x less", "offset", "tokens"):
        a, b = faults.apply_cadence(cadence, faulty, ref)
        assert "memorization" in detectors_that_fire(a, b), cadence


def test_005_nats_of_memorization_with_evaluations_half_an_interval_apart(shared_data):
    """Every pair interpolated, five checkpoints a run: caught once the follow leg pools the two
    judged checkpoints it needs and the interpolation error is counted once (missed before); the
    clean pair under the same cadence stays silent."""
    run_, ref = corpus.repeats("test")[1], corpus.repeats("test")[0]  # r04 against r02
    a, b = faults.apply_cadence("offset", faults.memorization(0.05)(run_), ref)
    assert "memorization" in detectors_that_fire(a, b)
    a, b = faults.apply_cadence("offset", run_, ref)
    assert detectors_that_fire(a, b) == set()


def test_005_nats_half_an_interval_apart_when_the_early_brackets_are_wide(shared_data):
    """r08 against r02 under the same cadence: the first, widest interpolation bracket had been read
    as 0.007 nats of eval noise, which doubled the last checkpoints' error (pooled follow z 2.4,
    missed); each second difference read against its own interpolation errors, it is caught."""
    repeats = corpus.repeats("test")
    run_, ref = repeats[3], repeats[0]
    assert (run_.name, ref.name) == ("r08", "r02")
    a, b = faults.apply_cadence("offset", faults.memorization(0.05)(run_), ref)
    assert "memorization" in detectors_that_fire(a, b)
    a, b = faults.apply_cadence("offset", run_, ref)
    assert detectors_that_fire(a, b) == set()


def test_a_reference_without_heldout_loss_says_memorization_was_not_judged(shared_data):
    run_, ref = corpus.repeats("test")[:2]
    ref = faults.thin_evals(ref, 10_000, phase=10_000)  # every held-out evaluation dropped
    result = judge(faults.memorization(0.1)(run_), ref, DetectConfig(detectors=["memorization"], write_series=False))
    assert result.detections == []
    (why,) = result.not_judged
    assert why.detector == "memorization" and "held-out" in why.reason


def test_window_z_means_what_it_says_on_the_13_repeats(shared_data):
    # With the window's own standard error alone, three quarters of the repeats' 100-step windows had
    # |z| > 3; two runs of one recipe should cross 3 in about 0.3% of windows.
    det = ReferenceDivergence()
    z = pd.concat([det.windows(a, b) for a, b in itertools.combinations(corpus.repeats("test"), 2)])
    z = z[z["complete"].astype(bool)]["z"].to_numpy(dtype=float)
    assert z.size > 150 and np.mean(np.abs(z) > 3) < 0.01
    # Not overconfident on pairs it was not fitted on (the test half's seeds happen to sit closer
    # than the calibration half's: a spread of 0.54, so the model errs on the safe side there).
    assert 0.3 < np.std(z) < 1.2


def test_a_sustained_regression_of_006_nats_is_divergence(shared_data):
    # Train and held-out 0.06 nats up from step 700, on every ordered pair of the test half's repeats:
    # the old train-loss band (0.05 plus the step-shift term) swallowed it in 13 of the 30.
    for run_, ref, family in corpus.clean_pairs("test"):
        if family != "repeats":
            continue
        worse = faults._copy(run_, run_.name)
        late = worse.scalars.index >= 700
        for col in [TRAIN_LOSS] + [c for c in worse.scalars if c.startswith(HELDOUT_PREFIX) and c.endswith("/loss")]:
            worse.scalars.loc[late, col] += 0.06
        fired = detectors_that_fire(worse, ref)
        assert "reference_divergence" in fired and "memorization" not in fired, (run_.name, ref.name)
        assert detectors_that_fire(run_, ref) == set()


def test_a_short_run_says_what_it_could_not_judge():
    steps = np.arange(1, 41)
    loss = loss_curve(steps)
    loss[30] *= 2  # a 2x loss spike in a 40-step run
    data = run("short", pd.DataFrame({TRAIN_LOSS: loss}, index=steps))
    result = judge(data, None, DetectConfig(detectors=["spike", "reference_divergence"], write_series=False))
    named = {(n.detector, n.metric): n for n in result.not_judged}
    assert named[("spike", TRAIN_LOSS)].needs == "121 more logged steps"
    assert "reference_divergence" in result.skipped
