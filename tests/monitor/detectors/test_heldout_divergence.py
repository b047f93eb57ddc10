"""Held-out divergence at the run's checkpoints, paired with the reference's evaluations whatever the
cadences, with logged standard errors or estimated ones, and the between-run noise."""

from __future__ import annotations

import numpy as np

from monitor.judging.align import align_pair
from monitor.detectors.checkpoints import heldout_pairs, over_sets
from monitor.detectors.heldout_divergence import ALL_SETS, HeldoutDivergence
from monitor.schema import Severity, heldout_key

from .synth import pair


def judged_checkpoints(run, ref):
    """Every checkpoint the detector judges over the sets together, with its band and z."""
    detector = HeldoutDivergence()
    return detector.judged(over_sets(heldout_pairs(run, ref, detector.stat(run, ref))))

HELD = heldout_key("c4", "loss")
STDERR = heldout_key("c4", "stderr")


def test_fires_when_heldout_rises_above_reference():
    run, ref = pair(n_steps=8000, offset_from=4000, held_offset=+0.12)
    (d,) = HeldoutDivergence().detect(run, ref)
    assert d.metric == HELD and d.start_step >= 4000 and d.evidence["direction"] == "above"
    assert d.evidence["set"] == "c4" and np.isfinite(d.evidence["z"]) and d.evidence["p_value"] < 1e-6
    assert d.severity == Severity.CRITICAL and "generalises worse" in d.message
    assert d.evidence["tau"] > 0 and d.evidence["band"] > 3 * d.evidence["tau"]


def test_silent_on_seed_noise_and_on_gaps_two_seeds_have():
    run, ref = pair(n_steps=8000)
    assert HeldoutDivergence().detect(run, ref) == []
    run, ref = pair(n_steps=8000, offset_from=2000, held_offset=+0.025)  # 4 stderr, but seed-sized
    assert HeldoutDivergence(noise_level=0.0).detect(run, ref) != []
    assert HeldoutDivergence().detect(run, ref) == []


def test_band_widens_with_large_standard_errors():
    run, ref = pair(n_steps=8000, offset_from=4000, held_offset=+0.08)
    assert HeldoutDivergence().detect(run, ref) != []
    for r in (run, ref):
        r.scalars[STDERR] = 0.05  # a tiny eval set
    assert HeldoutDivergence().detect(run, ref) == []


def test_without_standard_errors_the_noise_is_estimated_never_zero():
    run, ref = pair(n_steps=8000, offset_from=4000, held_offset=+0.12)
    for r in (run, ref):
        r.scalars = r.scalars.drop(columns=[STDERR])
    (d,) = HeldoutDivergence().detect(run, ref)
    assert np.isfinite(d.evidence["stderr"]) and d.evidence["stderr"] > 0
    table = judged_checkpoints(run, ref)
    assert table["stderr"].iloc[:3].isna().all()  # too few checkpoints yet: unknown, not zero
    assert table["z"].iloc[:3].isna().all()


def test_one_bad_checkpoint_is_not_enough():
    run, ref = pair(n_steps=8000)
    run.scalars.loc[3000, HELD] += 0.3
    assert HeldoutDivergence().detect(run, ref) == []


def test_a_reference_evaluating_less_often_is_interpolated_with_its_error():
    run, ref = pair(n_steps=8000, offset_from=4000, held_offset=+0.12, eval_every=250)
    sparse = ref.scalars[HELD]
    ref.scalars.loc[sparse.dropna().index[1::4], [HELD, STDERR]] = np.nan  # evaluates 4x less often
    a, r = align_pair(run, ref)
    (d,) = HeldoutDivergence().detect(a, r)
    assert d.evidence["interpolated"] > 0 and d.start_step >= 4000
    table = judged_checkpoints(a, r)
    assert (table.loc[~table["exact"].astype(bool), "interp_error"] > 0).all()


def test_sets_together_and_one_set_alone():
    run, ref = pair(n_steps=8000)
    for r, seed in ((run, 1), (ref, 2)):
        rng = np.random.default_rng(seed)
        for name in ("pile", "books"):
            r.scalars[heldout_key(name, "loss")] = r.scalars[HELD] + 0.1 + rng.normal(0, 0.002, len(r.scalars))
    run.scalars.loc[4000:, heldout_key("books", "loss")] += 0.4  # one set drifts on its own
    found = HeldoutDivergence().detect(run, ref)
    assert {d.metric for d in found} == {heldout_key("books", "loss")}
    run.scalars.loc[4000:, [HELD, heldout_key("pile", "loss")]] += 0.1  # now the model moves
    assert ALL_SETS in {d.metric for d in HeldoutDivergence().detect(run, ref)}


def test_a_reference_set_of_another_name_is_named_not_called_missing():
    # HF's `eval_loss` imported as the set "eval", the run's as "c4": nothing pairs, and the
    # reason names both sets instead of saying the reference logs no held-out loss.
    run, ref = pair(n_steps=8000)
    ref.scalars = ref.scalars.rename(columns={HELD: heldout_key("eval", "loss"), STDERR: heldout_key("eval", "stderr")})
    _, aligned = align_pair(run, ref)  # the engine judges the run against the aligned reference
    (why,) = HeldoutDivergence().not_judged(run, aligned)
    assert "held-out sets (c4) and the reference's (eval) share no name" in why.reason


def test_says_what_it_cannot_judge():
    run, ref = pair(n_steps=8000)
    ref.scalars = ref.scalars.drop(columns=[HELD, STDERR])
    (why,) = HeldoutDivergence().not_judged(run, ref)
    assert "reference logs no held-out loss" in why.reason
    run, ref = pair(n_steps=1200)
    for r in (run, ref):
        r.scalars = r.scalars.drop(columns=[STDERR])
    (why,) = HeldoutDivergence().not_judged(run, ref)
    assert "paired checkpoint" in why.reason and why.needs


def test_says_which_checkpoints_a_reference_that_stopped_left_unjudged():
    run, ref = pair(n_steps=8000)
    ref.scalars = ref.scalars[ref.scalars.index <= 5000]  # the reference ended at step 5,000
    _, aligned = align_pair(run, ref)
    (why,) = HeldoutDivergence().not_judged(run, aligned)
    assert why.metric == ALL_SETS
    assert why.reason == "the run's checkpoints on steps 5,500–8,000: the reference stops at step 5,000"
    # A run that ends first is compared up to its last step: nothing to say.
    run, ref = pair(n_steps=8000)
    run.scalars = run.scalars[run.scalars.index <= 5000]
    assert HeldoutDivergence().not_judged(run, align_pair(run, ref)[1]) == []
