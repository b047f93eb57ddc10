"""Memorization within one run: the held-out minus train gap widening beyond its own trend."""

from __future__ import annotations

from monitor.detectors.memorization_trend import MemorizationTrend
from monitor.schema import HELDOUT_TRAIN_GAP, TRAIN_LOSS

from .synth import pair


def test_gap_widening_fires_without_reference():
    run_, _ = pair(n_steps=12_000, offset_from=8000, offset=-0.25)
    (d,) = MemorizationTrend().detect(run_, None)
    assert d.metric == HELDOUT_TRAIN_GAP and d.detector == "memorization_trend"
    assert d.start_step >= 8000 and d.evidence["delta"] > 0.1 and d.evidence["delta"] > d.evidence["band"]


def test_silent_on_a_clean_run():
    run_, _ = pair(n_steps=12_000)
    assert MemorizationTrend().detect(run_, None) == []


def test_says_it_needs_more_checkpoints():
    run_, _ = pair(n_steps=2000)
    assert MemorizationTrend().detect(run_, None) == []
    (why,) = MemorizationTrend().not_judged(run_, None)
    assert "usable checkpoint" in why.reason and why.needs.endswith("more checkpoints")
    run_.scalars = run_.scalars.drop(columns=[c for c in run_.scalars if c.startswith("eval/")])
    (why,) = MemorizationTrend().not_judged(run_, None)
    assert "no held-out loss" in why.reason


def test_says_when_train_loss_is_logged_only_at_the_evaluations():
    # nanoGPT's W&B run: train loss is estimated at evaluation time only, beside the held-out loss.
    # A memorizing run, but no window before a checkpoint holds the logged steps a median needs,
    # and more checkpoints would not change that.
    run_, _ = pair(n_steps=12_000, offset_from=8000, offset=-0.25)
    held = run_.scalars.dropna(subset=[c for c in run_.scalars if c.startswith("eval/")], how="all").index
    run_.scalars.loc[~run_.scalars.index.isin(held), TRAIN_LOSS] = float("nan")
    assert MemorizationTrend().detect(run_, None) == []
    (why,) = MemorizationTrend().not_judged(run_, None)
    assert why.reason.startswith("train loss is logged too seldom between held-out evaluations")
    assert why.needs.startswith("train loss logged several times between held-out evaluations (against a reference")
