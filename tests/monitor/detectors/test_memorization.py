"""Memorization: train loss below the reference with held-out loss tied fires; a real
improvement (held-out follows) and seed noise stay silent; the within-run gap trend too; and the
in-batch comparison of re-read records with first reads."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from monitor.detectors import state_from_dict, state_to_dict
from monitor.detectors.rundata import make_run
from monitor.detectors.memorization import Memorization
from monitor.schema import (
    DATA_BATCH_REREAD_FRACTION,
    DATA_SEEN_2PLUS_FRACTION,
    TRAIN_LOSS,
    TRAIN_REREAD_LOSS_GAP,
    Severity,
)

from .synth import downstream, loss_curve, pair
from .test_incremental import pieces


def test_fires_when_train_drops_and_heldout_stays_tied():
    run_, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25, held_offset=-0.004)
    found = [d for d in Memorization(within_run=False).detect(run_, ref)]
    assert len(found) == 1
    d = found[0]
    assert d.metric == TRAIN_LOSS and 4000 <= d.start_step <= 5000 and d.end_step == 8000
    assert d.evidence["train_delta"] < -0.2 and abs(d.evidence["heldout_delta"]) < 0.02
    assert d.severity == Severity.CRITICAL
    assert "repeated training data" in d.message and "sharding" in d.message


def test_names_the_repeated_share_when_the_run_logs_coverage():
    run_, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25)
    run_.scalars[DATA_SEEN_2PLUS_FRACTION] = np.where(run_.scalars.index >= 4000, 0.264, 0.0)
    (d,) = Memorization(within_run=False).detect(run_, ref)
    assert d.evidence["seen_2plus_fraction"] == 0.264 and "26% of the corpus" in d.message


def test_silent_when_heldout_follows_a_real_improvement():
    run_, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25, held_offset=-0.22)
    assert Memorization(within_run=False).detect(run_, ref) == []


def test_silent_when_downstream_evals_improve_too():
    run_, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25)
    steps = np.arange(1, 8001)
    run_.scalars = run_.scalars.join(downstream(steps, 500, 1, delta=0.08, n=20_000), how="outer")
    ref.scalars = ref.scalars.join(downstream(steps, 500, 2, n=20_000), how="outer")
    # train loss is lower and every task is clearly better: not the memorization signature
    assert Memorization(within_run=False).detect(run_, ref) == []
    run_.scalars = run_.scalars.drop(columns=[c for c in run_.scalars if c.startswith("eval/downstream")])
    run_.scalars = run_.scalars.join(downstream(steps, 500, 1, delta=0.0, n=20_000), how="outer")
    assert len(Memorization(within_run=False).detect(run_, ref)) == 1


def test_silent_on_seed_noise_and_without_heldout():
    run_, ref = pair(n_steps=8000, same_order=False)
    assert Memorization().detect(run_, ref) == []
    run_, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25)
    run_.scalars = run_.scalars.drop(columns=[c for c in run_.scalars if c.startswith("eval/")])
    assert Memorization().detect(run_, ref) == []


def test_within_run_gap_widening_fires_without_reference():
    run_, _ = pair(n_steps=12_000, offset_from=8000, offset=-0.25)
    found = Memorization().detect(run_, None)
    assert len(found) == 1 and found[0].metric == "eval/heldout/gap"
    assert found[0].start_step >= 8000 and found[0].evidence["delta"] > 0.1


def test_within_run_silent_on_a_clean_run():
    run_, _ = pair(n_steps=12_000)
    assert Memorization().detect(run_, None) == []


def test_heldout_tie_uses_standard_errors():
    # A held-out move of 0.02 with stderr 0.004 is "not followed" for a 0.25 train drop.
    run_, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25, held_offset=-0.02)
    (d,) = Memorization(within_run=False).detect(run_, ref)
    assert np.isfinite(d.evidence["heldout_stderr"]) and d.evidence["z"] > 3


def reread_run(effect: float, share_from: int | None = 500, n_steps: int = 3000, seed: int = 0):
    """A run whose batches hold re-read records from `share_from` on (None: never, a clean run of
    one epoch), their share growing to a half; first reads score `effect` nats worse than re-reads,
    behind per-step noise of 0.4 nats (a batch of a few dozen records of code)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n_steps + 1)
    share = np.zeros(n_steps) if share_from is None else np.clip((steps - share_from) / n_steps, 0, 0.5)
    both = (share > 0) & (share < 1)
    gap = np.where(both, effect + rng.normal(0, 0.4, n_steps), 0.0)
    scalars = pd.DataFrame({TRAIN_LOSS: loss_curve(steps) + rng.normal(0, 0.04, n_steps),
                            DATA_BATCH_REREAD_FRACTION: share, TRAIN_REREAD_LOSS_GAP: gap},
                           index=pd.Index(steps, name="step"))
    return make_run("r", scalars)


def test_rereads_scoring_lower_than_first_reads_fire_without_reference():
    found = Memorization().detect(reread_run(effect=0.3), None)
    assert len(found) == 1
    d = found[0]
    assert d.metric == TRAIN_REREAD_LOSS_GAP and 500 <= d.start_step <= 700 and d.end_step >= 2800
    assert 0.2 < d.evidence["gap"] < 0.4 and d.evidence["z"] > 3 and d.severity == Severity.CRITICAL
    assert "remembers what it sees again" in d.message and "sharding" in d.message


def test_rereads_silent_without_an_effect_and_on_a_clean_epoch():
    for seed in range(5):
        assert Memorization().detect(reread_run(effect=0.0, seed=seed), None) == []
    assert Memorization().detect(reread_run(effect=0.3, share_from=None), None) == []


def test_rereads_judged_in_pieces_as_in_one_pass():
    run = reread_run(effect=0.3)
    whole = Memorization().detect(run, None)
    for size in (137, 1000):
        detector, state, final = Memorization(), Memorization().new_state(), {}
        for part in pieces(run, size):
            state = state_from_dict(json.loads(json.dumps(state_to_dict(state))))
            state, found = detector.update(state, part, None)
            final.update({(d.metric, d.start_step): d for d in found})
        assert [(d.start_step, d.end_step, d.peak_step) for d in final.values()] == \
            [(d.start_step, d.end_step, d.peak_step) for d in whole]
        assert len(state.tail.scalars) < len(run.scalars)
