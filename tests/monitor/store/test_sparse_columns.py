"""A long run's rarely logged series (evals every few thousand steps) load as sparse columns: the
frame grows with the run's dense metrics, not with the number of evals, and reads back the same
values; the detectors find the same things in it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from monitor.judging.engine import DetectionEngine
from monitor.schema import SPARSE_MIN_STEPS, TRAIN_LOSS, RunData, downstream_key, heldout_key
from monitor.store import open_store

STEPS = 3 * SPARSE_MIN_STEPS
HELDOUT, TASK, TASK_SE = heldout_key("c4_en", "loss"), downstream_key("arc_easy", "acc"), \
    downstream_key("arc_easy", "acc", "stderr")


def write_run(store, name: str, seed: int, shift: float, tokens_per_step: float = 4096.0) -> pd.DataFrame:
    """A run with a dense train loss, held-out loss every 200 steps (one logged as NaN) and a
    downstream task every 1,000; returns what it logged as a wide frame."""
    rng = np.random.default_rng(seed)
    s = np.arange(STEPS)
    wide = pd.DataFrame(index=pd.Index(s, name="step"))
    wide[TRAIN_LOSS] = 3 + 5 * (s + 50.0) ** -0.3 + rng.normal(0, 0.02, STEPS) + shift * (s > STEPS // 2)
    wide.loc[s % 200 == 0, HELDOUT] = wide.loc[s % 200 == 0, TRAIN_LOSS] + 0.05
    wide.loc[400, HELDOUT] = np.nan
    wide.loc[s % 1000 == 0, TASK] = 0.5 + rng.normal(0, 0.01, STEPS // 1000 + 1)
    wide.loc[s % 1000 == 0, TASK_SE] = 0.01
    store.ensure_run(name, tokens_per_step=tokens_per_step)
    logged = [wide[TRAIN_LOSS].rename("value").reset_index().assign(key=TRAIN_LOSS)]
    for key, every in ((HELDOUT, 200), (TASK, 1000), (TASK_SE, 1000)):
        logged.append(wide.loc[s % every == 0, key].rename("value").reset_index().assign(key=key))
    store.write_metrics(name, pd.concat(logged, ignore_index=True))
    return wide


def dense(run: RunData) -> RunData:
    return RunData(info=run.info, scalars=run.scalars.astype("float64"), events=run.events, repeats=run.repeats,
                   logged_nonfinite=run.logged_nonfinite)


@pytest.fixture
def stored(sqlite_url):
    with open_store(sqlite_url) as store:
        wide = write_run(store, "run", 1, -0.1)
        write_run(store, "ref", 2, 0.0)
        yield store, wide


def test_evals_load_sparse_and_read_back_as_logged(stored):
    store, wide = stored
    run = store.load_run("run")
    assert isinstance(run.scalars[HELDOUT].dtype, pd.SparseDtype)
    assert isinstance(run.scalars[TASK].dtype, pd.SparseDtype)
    assert run.scalars[TRAIN_LOSS].dtype == np.float64
    assert list(run.scalars.columns) == sorted(wide.columns)
    pd.testing.assert_frame_equal(run.scalars.astype("float64"), wide[sorted(wide.columns)], check_names=False)
    # The NaN logged at a checkpoint is told apart from the steps nothing was logged at.
    assert run.series(HELDOUT).index.tolist() == list(range(0, STEPS, 200))
    assert np.isnan(run.series(HELDOUT).loc[400])


def test_a_short_run_stays_dense(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("short")
        store.write_metrics("short", pd.DataFrame({"step": [0, 1000], "key": HELDOUT, "value": [3.0, 2.9]}))
        store.write_metrics("short", pd.DataFrame({"step": range(1001), "key": TRAIN_LOSS, "value": 3.0}))
        assert store.load_run("short").scalars[HELDOUT].dtype == np.float64


def test_detectors_find_the_same_in_sparse_and_dense_frames(stored):
    store, _ = stored
    run, ref = store.load_run("run"), store.load_run("ref")
    engine = DetectionEngine()
    sparse_found = engine.judge(run, ref)
    dense_found = engine.judge(dense(run), dense(ref))
    assert sparse_found.detections, "the drift below the reference is found"
    assert sparse_found.detections == dense_found.detections
    assert [(n.detector, n.metric, n.reason) for n in sparse_found.not_judged] == \
        [(n.detector, n.metric, n.reason) for n in dense_found.not_judged]


def test_a_reference_aligned_on_tokens_keeps_its_evals_sparse(sqlite_url):
    with open_store(sqlite_url) as store:
        write_run(store, "run", 1, -0.1)
        write_run(store, "ref", 2, 0.0, tokens_per_step=2048.0)  # half the batch: its step 2k is the run's k
        run, ref = store.load_run("run"), store.load_run("ref")
    engine = DetectionEngine()
    _, aligned = engine.align(run, ref)
    assert aligned.info.alignment.axis == "tokens"
    assert isinstance(aligned.scalars[HELDOUT].dtype, pd.SparseDtype)
    assert aligned.scalars[TRAIN_LOSS].dtype == np.float64
    _, aligned_dense = engine.align(dense(run), dense(ref))
    pd.testing.assert_frame_equal(aligned.scalars.astype("float64"), aligned_dense.scalars.astype("float64"))
    assert engine.judge(run, ref).detections == engine.judge(dense(run), dense(ref)).detections


def test_judged_piece_by_piece_against_a_sparse_reference_as_against_a_dense_one(stored):
    """The watch service's way: rows in pieces, the reference aligned once (its evals sparse)."""
    from monitor.detectors.rundata import slice_rows

    store, _ = stored
    run, ref = store.load_run("run"), store.load_run("ref")
    engine = DetectionEngine()
    found = {}
    for mode, (r, f) in {"sparse": (run, ref), "dense": (dense(run), dense(ref))}.items():
        _, aligned = engine.align(r, f)
        states, found[mode] = engine.new_states(), []
        for lo in range(0, STEPS, 1500):
            found[mode] += engine.update(states, slice_rows(r, lo, lo + 1499), aligned).detections
    assert found["sparse"] and found["sparse"] == found["dense"]
