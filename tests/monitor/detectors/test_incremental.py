"""Incremental mode: feeding a run in pieces (through JSON state round trips) reports the same
intervals as judging it whole, and the state stays small."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from bench.quality.faults import train_every
from monitor.detectors import REGISTRY, build, state_from_dict, state_to_dict
from monitor.detectors.rundata import slice_rows
from monitor.schema import (
    DATA_BATCH_REREAD_FRACTION,
    DATA_CURSOR,
    PERF_MFU,
    PERF_STEP_TIME_S,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    TRAIN_REREAD_LOSS_GAP,
    EventKind,
    RunData,
    downstream_key,
    heldout_key,
)

from .synth import full_run

SMALL = {  # shorter windows so that six thousand steps trim the tails many times over
    "spike": {"score_window": 700, "olmo2_window": 300},
    "throughput": {"block_points": 200, "baseline_blocks": 10},
    "nonfinite": {"baseline_points": 100},
    "grad_norm_growth": {"block_points": 200},
}


def faulty_pair() -> tuple[RunData, RunData]:
    run, ref = full_run("run", 6000, seed=1), full_run("reference", 6000, seed=2)
    s = run.scalars
    ramp = np.clip((s.index.to_numpy() - 3000) / 300.0, 0, 1)
    s[TRAIN_LOSS] -= 0.25 * ramp  # memorization from step 3000: held-out stays tied
    s.loc[[1500, 1530, 4100], TRAIN_LOSS] += [0.8, 0.6, 1.0]
    s.loc[2222, TRAIN_GRAD_NORM] *= 6
    s.loc[4500, PERF_STEP_TIME_S] = 6.0
    s.loc[s.index % 250 == 0, PERF_STEP_TIME_S] *= 1.4
    s.loc[3500:, PERF_MFU] *= 0.7
    s.loc[5001:, DATA_CURSOR] -= 32  # a resume that left the loader one batch behind
    s.loc[s.index >= 4000, downstream_key("piqa", "acc")] -= 0.15
    s.loc[s.index >= 5000, heldout_key("c4", "loss")] += 0.2
    s.loc[5900:5905, TRAIN_GRAD_NORM] = np.nan
    s.loc[4000:, TRAIN_GRAD_NORM] *= np.clip((s.index[s.index >= 4000] - 4000) / 500.0, 0, 2) + 1  # grows 3x
    rng = np.random.default_rng(5)
    share = np.clip((s.index.to_numpy() - 2000) / 6000.0, 0, 0.5)  # a second epoch mixes re-reads in
    s[DATA_BATCH_REREAD_FRACTION] = share
    s[TRAIN_REREAD_LOSS_GAP] = np.where(share > 0, 0.3 + rng.normal(0, 0.4, share.size), 0.0)
    run.logged_nonfinite = pd.DataFrame({"key": TRAIN_GRAD_NORM, "step": np.arange(5900, 5906, dtype="int64"),
                                         "value": np.nan})
    run.events = pd.DataFrame({"step": [5001], "kind": [EventKind.RESUME.value], "attempt": [2],
                               "payload": [{"restored_step": 5001, "restored_data_position": 5000 * 32,
                                            "global_batch_size": 32}]})
    return run, ref


def pieces(run: RunData, size: int, first: int = 0):
    """The run in pieces of `size` rows, after a first piece of `first` rows (a watcher catching up)."""
    steps = run.scalars.index.to_numpy()
    edges = ([0] if first else []) + list(range(first, steps.size, size)) + [steps.size]
    lo = -math.inf
    for a, b in zip(edges[:-1], edges[1:]):
        hi = float(steps[b - 1])
        part = slice_rows(run, lo + 0.5 if lo > -math.inf else lo, hi)
        lo = hi
        yield part


# Windowed detectors judge the last, partial window of each piece on fewer points, so the peak
# they keep may be one a whole-run pass would not pick; the interval and severity are the same.
WINDOWED = {"reference_divergence", "throughput", "memorization_reread", "grad_norm_growth", "heldout_divergence",
            "memorization"}


def key(d):
    peak = None if d.detector in WINDOWED else d.peak_step
    return (d.detector, d.metric, d.start_step, d.end_step, peak, d.severity.value)


def judged_in_pieces(detector, run, ref, size, first: int = 0):
    state = detector.new_state()
    final = {}
    for part in pieces(run, size, first):
        state = state_from_dict(json.loads(json.dumps(state_to_dict(state))))
        state, found = detector.update(state, part, ref)
        for d in found:
            final[(d.metric, d.start_step)] = d
    return sorted(final.values(), key=lambda d: (d.start_step, d.metric)), state


@pytest.mark.parametrize("name", list(REGISTRY))
def test_pieces_report_what_the_whole_run_reports(name):
    run, ref = faulty_pair()
    (detector,) = build([name], SMALL)
    whole = detector.detect(run, ref)
    assert whole, f"the faulty run must trip {name}"
    for size in (250, 1111):
        pieces_found, state = judged_in_pieces(detector, run, ref, size)
        if name == "throughput":  # goodput is over the rows a piece judges, not the whole run
            whole_ = [d for d in whole if d.metric != "perf/goodput"]
            pieces_found = [d for d in pieces_found if d.metric != "perf/goodput"]
        else:
            whole_ = whole
        assert [key(d) for d in pieces_found] == [key(d) for d in whole_], (name, size)
        # Bounded by the windows the detector needs, not by the run: each column keeps at most the
        # history it declares (or, where it keeps a window of its own, well under the whole run).
        assert state.tail is not None
        for column in state.tail.scalars.columns:
            kept = int(state.tail.scalars[column].notna().sum())
            logged = int(run.scalars[column].notna().sum())
            limit = detector.history_points(column)
            assert kept <= (limit + 1 if limit is not None else 0.6 * logged), (name, column, kept, limit, logged)


def test_memorization_in_pieces_when_train_loss_is_logged_only_at_evaluations():
    # Its train window then reaches back over several checkpoints: what the state keeps covers it.
    run, ref = faulty_pair()
    for data in (run, ref):
        s = data.scalars
        s.loc[s[heldout_key("c4", "loss")].isna(), TRAIN_LOSS] = np.nan
    (detector,) = build(["memorization"])
    whole = detector.detect(run, ref)
    assert whole
    for size in (250, 1111):
        assert [key(d) for d in judged_in_pieces(detector, run, ref, size)[0]] == [key(d) for d in whole], size


def test_reference_divergence_in_pieces_when_train_loss_is_logged_every_50_steps_as_a_mean():
    # Windows of eight values, 400 steps: longer than some pieces, fixed once the interval is known.
    run, ref = (train_every(data, 50) for data in faulty_pair())
    (detector,) = build(["reference_divergence"])
    assert detector.width(run) == 400
    whole = detector.detect(run, ref)
    assert whole
    for size in (150, 1111):  # steps per piece
        assert [key(d) for d in judged_in_pieces(detector, run, ref, size)[0]] == [key(d) for d in whole], size


def test_state_is_plain_json_with_nan_and_inf_kept_apart():
    run, ref = faulty_pair()
    run.scalars.loc[5950, PERF_MFU] = np.inf
    (detector,) = build(["nonfinite"])
    state, _ = detector.update(detector.new_state(), run, ref)
    text = json.dumps(state_to_dict(state), allow_nan=False)  # strict JSON
    back = state_from_dict(json.loads(text))
    assert back.tail.scalars.loc[5950, PERF_MFU] == np.inf
    assert set(back.tail.logged_nonfinite["step"]) == set(range(5900, 5906))
    assert np.isnan(back.tail.scalars.loc[5900, TRAIN_GRAD_NORM])


def test_unchanged_intervals_are_not_reported_twice_and_growing_ones_keep_their_start():
    run, ref = faulty_pair()
    (detector,) = build(["data_invariants"])
    state = detector.new_state()
    seen = []
    for part in pieces(run, 200):
        state, found = detector.update(state, part, ref)
        seen.extend(found)
    cursor = [d for d in seen if d.metric == DATA_CURSOR]
    assert {d.start_step for d in cursor} == {5001}  # one interval, upserted as it grew
    assert [d.end_step for d in cursor] == sorted(d.end_step for d in cursor)
    state, found = detector.update(state, slice_rows(run, 6000.5, math.inf), ref)
    assert found == []


def test_rows_logged_again_after_a_restart_replace_the_old_ones():
    run, ref = faulty_pair()
    (detector,) = build(["nonfinite"], SMALL)
    state, _ = detector.update(detector.new_state(), slice_rows(run, -math.inf, 5950), ref)
    again = slice_rows(run, 5800, 6000)
    again.scalars = again.scalars.copy()
    again.scalars[TRAIN_GRAD_NORM] = 0.3  # the restarted attempt logs finite values
    again.logged_nonfinite = again.logged_nonfinite.iloc[0:0]
    state, found = detector.update(state, again, ref)
    assert np.isfinite(state.tail.scalars.loc[5900, TRAIN_GRAD_NORM])


@pytest.mark.parametrize("size", [37, 150, 1111])
def test_the_spike_score_in_pieces_is_the_whole_runs_curve_from_the_first_verdict(size):
    run, _ = faulty_pair()
    detector = build(["spike"], {"spike": SMALL["spike"]})[0]
    whole = detector.detect_with_series(run)[1]
    state, drawn = detector.new_state(), []
    for part in pieces(run, size):
        state, _ = detector.update(state, part, None)
        if state.series is not None:
            drawn.append(state.series)
        state.series = None
    drawn = pd.concat(drawn, ignore_index=True)
    for key, curve in whole.groupby("key"):
        mine = drawn[drawn["key"] == key]
        # Both start at the rule's first verdict, not at the run's first step.
        assert mine["step"].min() == curve["step"].min() == run.scalars.index[detector.first_verdict_points()]
        # The same curve: each point kept in pieces lies on the whole run's step-wise line (its
        # value holds from one kept point to the next).
        steps = curve["step"].to_numpy()
        at = curve["value"].to_numpy()[np.searchsorted(steps, mine["step"].to_numpy(), side="right") - 1]
        np.testing.assert_allclose(mine["value"].to_numpy(), at)


@pytest.mark.slow
@pytest.mark.parametrize(("size", "first"), [(1, 3900), (97, 0), (1111, 0)])
def test_a_jump_that_stays_up_longer_than_the_tail_is_one_detection_in_pieces(size, first):
    # Its excursion outlives the rows the state keeps: the state carries it, so the pieces reach
    # the whole run's detection, message and score included, and the state stays bounded. One-row
    # pieces start a hundred rows before the jump: the state round trip per row is what costs.
    run, _ = faulty_pair()
    run.scalars.loc[run.scalars.index >= 4000, TRAIN_LOSS] += 1.0
    (detector,) = build(["spike"])
    whole = [d for d in detector.detect(run) if d.metric == TRAIN_LOSS]
    found, state = judged_in_pieces(detector, run, None, size, first)
    found = [d for d in found if d.metric == TRAIN_LOSS]
    assert [d.to_dict() for d in found] == [d.to_dict() for d in whole]
    jump = next(d for d in whole if d.start_step == 4000)
    assert jump.end_step == run.scalars.index[-1] and "not recovered after" in jump.message
    assert state.tail.scalars[TRAIN_LOSS].notna().sum() <= detector.history_points(TRAIN_LOSS) + 1


def test_two_rules_on_one_metric_stay_two_detections_in_pieces():
    # A stall in the middle of a stretch of periodic pauses: both are about perf/step_time_s,
    # neither may swallow the other when the run arrives in pieces.
    run, ref = faulty_pair()
    s = run.scalars
    s.loc[3333, PERF_STEP_TIME_S] = 9.0
    (detector,) = build(["throughput"], SMALL)
    whole = {(d.evidence.get("rule"), d.start_step, d.end_step) for d in detector.detect(run, ref)
             if d.metric == PERF_STEP_TIME_S}
    found, _ = judged_in_pieces(detector, run, ref, 97)
    pieces = {(d.evidence.get("rule"), d.start_step, d.end_step) for d in found if d.metric == PERF_STEP_TIME_S}
    assert ("stall", 3333, 3333) in whole and pieces == whole


def test_a_spike_that_has_ended_is_not_reported_again_with_less_history(shared_data):
    """A real run (modded-nanogpt AdamW at 1.5B, 20,000 steps, 100 loss spikes) in pieces: an
    excursion that ended before a piece was settled with all its history; judged again at the start
    of a shorter tail its score drifts, and reporting it again would tell a watcher of an old spike
    as news. Each spike is reported with the score the whole run gives it."""
    from bench.quality import corpus

    run = corpus.scaleup()["adamw-1.5b"]
    (detector,) = build(["spike"])
    whole = {(d.metric, d.start_step): d.score for d in detector.detect(run)}
    state, reported = detector.new_state(), {}
    for part in pieces(run, 1849):
        first = int(part.scalars.index[0])
        state, found = detector.update(state, part)
        assert [d.start_step for d in found if d.end_step < first] == []
        reported.update({(d.metric, d.start_step): d.score for d in found})
    assert len(whole) > 50 and reported == pytest.approx(whole)
