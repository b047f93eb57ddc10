"""Alignment of a run with its reference: real OLMo exports and small hand-made runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from monitor import schema
from monitor.judging.align import EVAL_PREFIX, AlignConfig, PreparedReference, align_pair
from monitor.detectors.eval_keys import matching_steps
from monitor.errors import GapwatchError
from monitor.schema import RunData, RunInfo
from monitor.importers import ImportedRun, load, scalars_frame

C4 = schema.heldout_key("c4_en-validation")
HELLASWAG = "eval/downstream/hellaswag/len_norm"


def _run(name, series: dict[str, dict[int, float]], tokens_per_step=None, attempts=None,
         events=()):
    steps, keys, values, att = [], [], [], []
    for key, points in series.items():
        for step, value in points.items():
            steps.append(step)
            keys.append(key)
            values.append(value)
            att.append((attempts or {}).get((key, step), 1))
    order = np.argsort(np.array(att), kind="stable")
    frame = scalars_frame(np.array(steps)[order], np.array(keys, dtype=object)[order],
                          np.array(values)[order], np.array(att)[order])
    return ImportedRun(name, frame, tokens_per_step=tokens_per_step,
                       events=list(events)).to_run_data(name)


def _same_index(a, b):
    """Dense series pair step for step; evals pair at the checkpoints both have (matching_steps)."""
    for key in a.scalars.columns:
        if not key.startswith(EVAL_PREFIX):
            assert a.series(key).index.equals(b.series(key).index), key


def test_olmo_rerun_evaluating_twice_as_often_pairs_shared_checkpoints_and_keeps_its_others(shared_data):
    base = shared_data / "runs/olmo-wandb-exports/ladder"
    run = load(base / "peteish-moreeval__190M-1xC.csv").to_run_data("run")
    ref = load(base / "peteish-moreeval__190M-1xC-rerun.csv").to_run_data("rerun")
    a, r = align_pair(run, ref)
    assert a.info.alignment.axis == "step"
    _same_index(a, r)
    # Every run checkpoint is paired; the rerun's extra ones stay at their own steps; values untouched.
    paired = matching_steps(a, r, C4)
    assert list(paired) == list(run.series(C4).index)
    assert a.series(C4).equals(run.series(C4))
    assert r.series(C4).equals(ref.series(C4).loc[r.series(C4).index])
    assert {100, 300, 7200} <= set(r.series(C4).index) and len(r.series(C4)) == len(ref.series(C4))
    # The README: c4 run vs rerun within 0.021 nats for the 190M.
    assert (a.series(C4).loc[paired] - r.series(C4).loc[paired]).abs().max() <= 0.021


def test_token_axis_when_batch_sizes_differ(shared_data):
    base = shared_data / "runs/olmo-wandb-exports/peteish1"
    run = load(base / "peteish1.csv").to_run_data("b512")       # 2,097,152 tokens a step
    ref = load(base / "peteish1-b384.csv").to_run_data("b384")  # 1,572,864 tokens a step
    a, r = align_pair(run, ref)
    meta = a.info.alignment
    assert meta.axis == "tokens" and "differ" in meta.reason
    _same_index(a, r)
    # Held-out/downstream evals pair at checkpoints with the same tokens (within 0.5%): early on
    # that is every 3,000 run steps (= 4,000 reference steps) exactly. Values are never changed.
    paired = matching_steps(a, r, HELLASWAG)
    early = paired[paired < 40000]
    assert len(early) == 13 and (early % 3000 == 0).all()
    ref_hs = ref.series(HELLASWAG)
    for step, value in r.series(HELLASWAG).items():
        nearest = ref_hs.index[np.argmin(np.abs(ref_hs.index * 1572864 - step * 2097152))]
        if step in paired:
            assert abs(nearest * 1572864 - step * 2097152) <= 0.005 * step * 2097152
        else:  # an unmatched reference checkpoint, at its own place on the run's steps
            assert abs(nearest * 1572864 - step * 2097152) <= 0.5 * 2097152
        assert value == ref_hs.loc[nearest]
    # The reference's tokens, placed on the run's steps, equal the run's own tokens.
    tok_a, tok_r = a.series(schema.TRAIN_TOKENS), r.series(schema.TRAIN_TOKENS)
    assert len(tok_a) > 50
    np.testing.assert_allclose(tok_r.to_numpy(), tok_a.to_numpy(), rtol=1e-9)


def test_step_axis_forced_keeps_steps(shared_data):
    base = shared_data / "runs/olmo-wandb-exports/peteish1"
    run = load(base / "peteish1.csv").to_run_data("b512")
    ref = load(base / "peteish1-b384.csv").to_run_data("b384")
    a, r = align_pair(run, ref, axis="step")
    assert a.info.alignment.axis == "step"
    shared = run.series(HELLASWAG).index.intersection(ref.series(HELLASWAG).index)
    assert list(matching_steps(a, r, HELLASWAG)) == list(shared)


def test_dense_reference_interpolated_only_across_small_gaps():
    run = _run("run", {schema.TRAIN_LOSS: {s: 3.0 for s in range(0, 101)}})
    # Logs every 10 steps, but nothing between 40 and 80 (a gap of 4 usual intervals).
    pts = {s: 10.0 - s / 10 for s in [0, 10, 20, 30, 40, 80, 90, 100]}
    ref = _run("ref", {schema.TRAIN_LOSS: pts})
    a, r = align_pair(run, ref, axis="step")
    loss = r.series(schema.TRAIN_LOSS)
    assert loss.loc[15] == pytest.approx(8.5)          # between 10 and 20: interpolated
    assert loss.loc[40] == pytest.approx(6.0)          # exact
    assert not any(41 <= s <= 79 for s in loss.index)  # the gap is not bridged
    assert loss.loc[85] == pytest.approx(1.5)
    assert a.series(schema.TRAIN_LOSS).index.equals(loss.index)
    assert a.info.alignment.metrics[schema.TRAIN_LOSS]["method"].startswith("interp")


def test_the_record_keeps_where_the_reference_logged_a_metric_that_pairs_at_no_step():
    # The reference ended before the run began: its train loss leaves the aligned frames, and the
    # record is what lets a detector say so rather than "the reference logs no train/loss".
    run = _run("run", {schema.TRAIN_LOSS: {s: 3.0 for s in range(1000, 1100)}})
    ref = _run("ref", {schema.TRAIN_LOSS: {s: 4.0 for s in range(1, 901)}, C4: {500: 3.5}})
    _, r = align_pair(run, ref, axis="step")
    assert schema.TRAIN_LOSS not in r.scalars.columns
    assert r.info.alignment.metrics[schema.TRAIN_LOSS] == {
        "points": 0, "method": "no common step", "reference_steps": [1, 900], "reference_at": [1, 900],
        "reference_points": 900}


def test_exact_where_logged_interpolated_between():
    run = _run("run", {schema.TRAIN_LOSS: {s: 1.0 for s in range(0, 20)}})
    ref = _run("ref", {schema.TRAIN_LOSS: {s: float(s) for s in range(0, 20, 2)}})
    a, r = align_pair(run, ref, axis="step")
    loss = r.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(0, 19))
    assert loss.loc[4] == 4.0 and loss.loc[5] == pytest.approx(5.0)
    # Piece by piece (as the watch service aligns) gives the same values.
    piece = _run("run", {schema.TRAIN_LOSS: {s: 1.0 for s in range(5, 8)}})
    _, r2 = align_pair(piece, ref, axis="step")
    assert r2.series(schema.TRAIN_LOSS).to_dict() == loss.loc[5:7].to_dict()


@pytest.mark.parametrize("axis", ["step", "tokens"])
def test_a_prepared_reference_aligns_each_piece_of_a_run_as_the_whole_run(axis):
    # The reference takes twice the run's tokens a step and logs every 2 steps, with a gap from
    # its step 40 to 60 and a restart at 70: on the token axis its step k lands on the run's 2k.
    pts = {s: 10.0 - s / 50 for s in range(0, 101, 2) if not 40 < s < 60}
    ref = _run("ref", {schema.TRAIN_LOSS: pts}, tokens_per_step=2000,
               events=[{"step": 70, "kind": "restart", "payload": {}}])
    run_points = {s: 1.0 for s in range(0, 201)}
    run = _run("run", {schema.TRAIN_LOSS: run_points}, tokens_per_step=1000)
    _, whole = align_pair(run, ref, axis=axis)
    loss = whole.series(schema.TRAIN_LOSS)
    if axis == "tokens":
        assert loss.loc[2] == pytest.approx(10.0 - 1 / 50) and loss.loc[4] == pytest.approx(10.0 - 2 / 50)
        # The gap is 10 of the reference's usual intervals; the restart splits 68..70 (136..140).
        assert not any(81 <= s <= 119 for s in loss.index) and not any(137 <= s <= 139 for s in loss.index)
    prepared = PreparedReference(ref)
    for lo in range(0, 201, 7):
        piece = _run("run", {schema.TRAIN_LOSS: {s: 1.0 for s in range(lo, min(lo + 7, 201))}},
                     tokens_per_step=1000)
        _, part = align_pair(piece, prepared, axis=axis)
        assert part.series(schema.TRAIN_LOSS).to_dict() == loss.loc[lo:lo + 6].to_dict(), lo


def test_a_prepared_reference_holds_a_metric_logged_at_every_step_without_copying_it():
    steps = pd.Index(np.arange(0, 5000, dtype="int64"), name="step")
    ref = RunData(info=RunInfo(name="ref"), scalars=pd.DataFrame({schema.TRAIN_LOSS: 3.0 - steps / 5000}, index=steps))
    log = PreparedReference(ref).log(schema.TRAIN_LOSS)
    assert np.shares_memory(log.steps, ref.scalars.index.to_numpy())
    assert np.shares_memory(log.values, ref.scalars[schema.TRAIN_LOSS].to_numpy())
    assert log.usual_gap == 1.0


def test_no_interpolation_across_a_reference_restart():
    # Attempt 2 restarted from step 40 (logged 40 again): 40 is an attempt boundary.
    ref_two = ImportedRun(
        "ref",
        scalars_frame(
            [0, 10, 20, 30, 40, 40, 50, 60],
            [schema.TRAIN_LOSS] * 8,
            [5.0, 5.0, 5.0, 5.0, 5.0, 4.0, 4.0, 4.0],
            [1, 1, 1, 1, 1, 2, 2, 2],
        ),
    ).to_run_data("ref")
    run = _run("run", {schema.TRAIN_LOSS: {s: 1.0 for s in range(0, 61)}})
    a, r = align_pair(run, ref_two, axis="step")
    loss = r.series(schema.TRAIN_LOSS)
    assert loss.loc[40] == 4.0                    # latest attempt wins
    assert 35 not in loss.index                   # 30 (attempt 1) .. 40 (attempt 2): not bridged
    assert loss.loc[25] == 5.0 and loss.loc[45] == 4.0


def test_restart_event_also_blocks_interpolation():
    ref = _run("ref", {schema.TRAIN_LOSS: {0: 5.0, 10: 5.0, 20: 3.0, 30: 3.0}},
               events=[{"step": 20, "kind": "restart", "payload": {}}])
    run = _run("run", {schema.TRAIN_LOSS: {s: 1.0 for s in range(0, 31)}})
    _, r = align_pair(run, ref, axis="step")
    idx = set(r.series(schema.TRAIN_LOSS).index)
    assert 15 not in idx and 5 in idx and 25 in idx


def test_logged_nan_kept_at_exact_match_never_interpolated():
    ref = _run("ref", {schema.TRAIN_LOSS: {0: 1.0, 10: math.nan, 20: 3.0, 30: 4.0}})
    run = _run("run", {schema.TRAIN_LOSS: {s: 0.5 for s in range(0, 31)}})
    _, r = align_pair(run, ref, axis="step")
    loss = r.series(schema.TRAIN_LOSS)
    assert math.isnan(loss.loc[10])
    assert 5 not in loss.index and 15 not in loss.index and loss.loc[25] == pytest.approx(3.5)
    assert list(r.logged_nonfinite["step"]) == [10]


def test_token_axis_eval_tolerance_and_one_to_one():
    # Run: 1,000 tokens a step, evals at 100, 200, 300. Reference: 3,000 tokens a step.
    run = _run("run", {C4: {100: 3.0, 200: 2.5, 300: 2.2}}, tokens_per_step=1000)
    # 33 ref steps = 99,000 tokens (1% off step 100), 67 = 201,000 (0.5% off 200), 100 exact.
    ref = _run("ref", {C4: {33: 3.1, 67: 2.6, 100: 2.3}}, tokens_per_step=3000)
    a, r = align_pair(run, ref)
    assert a.info.alignment.axis == "tokens"
    assert r.series(C4).to_dict() == {99: 3.1, 200: 2.6, 300: 2.3}  # 33 is 1% off 100: not its partner
    assert list(matching_steps(a, r, C4)) == [200, 300]
    a2, r2 = align_pair(run, ref, config=AlignConfig(eval_match_rel_tol=0.02))
    assert r2.series(C4).to_dict() == {100: 3.1, 200: 2.6, 300: 2.3}


def test_tokens_axis_needs_token_information():
    run = _run("run", {schema.TRAIN_LOSS: {0: 1.0, 1: 1.0}})
    ref = _run("ref", {schema.TRAIN_LOSS: {0: 1.0, 1: 1.0}}, tokens_per_step=10)
    with pytest.raises(GapwatchError, match="cannot align on tokens: run 'run'"):
        align_pair(run, ref, axis="tokens")
    a, _ = align_pair(run, ref)  # auto falls back to steps, saying why
    assert a.info.alignment.reason.startswith("tokens per step unknown")
    with pytest.raises(GapwatchError, match="axis must be one of"):
        align_pair(run, ref, axis="time")


def test_a_token_count_that_does_not_grow_aligns_on_steps():
    # A run whose train/tokens is stuck at one value (a counter never advanced) beside one whose
    # count grows: auto judges them on steps rather than refusing the pair.
    stuck = _run("stuck", {schema.TRAIN_LOSS: {s: 1.0 for s in range(5)}, schema.TRAIN_TOKENS: {s: 4096.0 for s in range(5)}})
    ref = _run("ref", {schema.TRAIN_LOSS: {s: 1.0 for s in range(5)}, schema.TRAIN_TOKENS: {s: 4096.0 * s for s in range(5)}})
    a, _ = align_pair(stuck, ref)
    assert a.info.alignment.axis == "step" and "does not grow" in a.info.alignment.reason
    with pytest.raises(GapwatchError, match="cannot align on tokens: run 'stuck' has neither tokens_per_step nor a growing"):
        align_pair(stuck, ref, axis="tokens")


def test_train_tokens_series_handles_a_batch_size_change():
    # The run doubles its batch at step 10: tokens 0..10k at 1k/step, then 2k/step.
    tokens = {s: (s * 1000 if s <= 10 else 10000 + (s - 10) * 2000) for s in range(0, 21)}
    run = _run("run", {schema.TRAIN_TOKENS: tokens, schema.TRAIN_LOSS: {s: 1.0 for s in tokens}})
    ref = _run("ref", {schema.TRAIN_LOSS: {s: float(s) for s in range(0, 31)}},
               tokens_per_step=1000)
    a, r = align_pair(run, ref, axis="tokens")
    loss = r.series(schema.TRAIN_LOSS)
    # Run step 15 = 20,000 tokens = reference step 20.
    assert loss.loc[15] == pytest.approx(20.0) and loss.loc[5] == pytest.approx(5.0)
    assert loss.loc[20] == pytest.approx(30.0)


def test_a_pair_on_the_same_steps_shares_the_frames_and_stays_apart_on_write():
    """Aligning runs logged at the same steps returns their frames as they are (no copy of a
    1.4M-step frame); writing into an aligned frame leaves the run untouched."""
    steps = pd.Index(np.arange(0, 3000, dtype="int64"), name="step")
    def run(name, shift):
        frame = pd.DataFrame({"train/loss": 3.0 - steps / 3000 + shift,
                              "eval/heldout/c4/loss": np.where(steps % 500 == 0, 3.1 + shift, np.nan)}, index=steps)
        return RunData(info=RunInfo(name=name), scalars=frame)
    a, b = run("a", 0.0), run("b", 0.1)
    aligned_a, aligned_b = align_pair(a, b, axis="step")
    pd.testing.assert_frame_equal(aligned_a.scalars, a.scalars)
    pd.testing.assert_frame_equal(aligned_b.scalars, b.scalars)
    aligned_a.scalars.iloc[0, 0] = 99.0
    assert a.scalars.iloc[0, 0] == 3.0
    # A gap in the reference's log: the frames are built anew, and the run keeps only fair pairs.
    b.scalars = b.scalars.drop(index=range(1500, 1510))
    aligned_a, aligned_b = align_pair(a, b, axis="step")
    kept = aligned_a.series("train/loss").index
    assert len(kept) == 2990 and 1505 not in kept and 1499 in kept
    assert aligned_b.series("train/loss").index.equals(kept)
    assert aligned_a.series("eval/heldout/c4/loss").index.tolist() == list(range(0, 3000, 500))
