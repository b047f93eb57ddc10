"""Memorization inside each batch: records read before against first reads on the same parameters."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from monitor.detectors import state_from_dict, state_to_dict
from monitor.detectors.memorization_reread import MemorizationReread
from monitor.detectors.rundata import make_run
from monitor.schema import DATA_BATCH_REREAD_FRACTION, TRAIN_LOSS, TRAIN_REREAD_LOSS_GAP, Severity

from .synth import loss_curve
from .test_incremental import pieces


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
    (d,) = MemorizationReread().detect(reread_run(effect=0.3), None)
    assert d.metric == TRAIN_REREAD_LOSS_GAP and d.detector == "memorization_reread"
    assert 500 <= d.start_step <= 700 and d.end_step >= 2800
    assert 0.2 < d.evidence["gap"] < 0.4 and d.evidence["z"] > 3 and d.severity == Severity.CRITICAL
    assert "remembers what it sees again" in d.message and "sharding" in d.message


def test_rereads_silent_without_an_effect_and_on_a_clean_epoch():
    for seed in range(5):
        assert MemorizationReread().detect(reread_run(effect=0.0, seed=seed), None) == []
    clean = reread_run(effect=0.3, share_from=None)
    assert MemorizationReread().detect(clean, None) == []
    (why,) = MemorizationReread().not_judged(clean, None)
    assert "clean first epoch" in why.reason


def test_rereads_judged_in_pieces_as_in_one_pass():
    run = reread_run(effect=0.3)
    whole = MemorizationReread().detect(run, None)
    for size in (137, 1000):
        detector, state, final = MemorizationReread(), MemorizationReread().new_state(), {}
        for part in pieces(run, size):
            state = state_from_dict(json.loads(json.dumps(state_to_dict(state))))
            state, found = detector.update(state, part, None)
            final.update({(d.metric, d.start_step): d for d in found})
        assert [(d.start_step, d.end_step, d.peak_step) for d in final.values()] == \
            [(d.start_step, d.end_step, d.peak_step) for d in whole]
        assert len(state.tail.scalars) < len(run.scalars)
