"""The watch service reads every new row exactly once: late evals, replays after a restart, long runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from monitor.store import open_store
from monitor.watch import rows


@pytest.fixture
def store(sqlite_url):
    s = open_store(sqlite_url)
    s.ensure_run("r")
    yield s
    s.close()


def write(store, key, steps, value=1.0, attempt=1):
    store.write_metrics("r", pd.DataFrame({"step": list(steps), "key": key, "value": value, "attempt": attempt}))


def read(store, cursor, window=50_000):
    m = rows.marks(store, "r")
    if not rows.has_news(cursor, m):
        return None
    return rows.read_batch(store, "r", store.run_info("r"), cursor, m, window)


def test_nothing_new_costs_no_read(store):
    write(store, "train/loss", range(10))
    cursor = rows.Cursor()
    assert list(read(store, cursor).rows.scalars.index) == list(range(10))
    assert read(store, cursor) is None


def test_an_eval_logged_after_later_training_steps_is_not_skipped(store):
    write(store, "train/loss", range(0, 1011))
    cursor = rows.Cursor()
    read(store, cursor)
    write(store, "eval/heldout/c4/loss", [1000], value=3.2)  # the eval of step 1000 lands late
    write(store, "train/loss", range(1011, 1020))
    batch = read(store, cursor)
    assert batch.rows.scalars.loc[1000, "eval/heldout/c4/loss"] == 3.2
    assert list(batch.rows.series("train/loss").index) == list(range(1011, 1020))


def test_steps_replayed_by_a_new_attempt_are_read_with_both_values(store):
    write(store, "train/loss", range(0, 100), value=2.0, attempt=1)
    store.new_attempt("r")
    cursor = rows.Cursor()
    read(store, cursor)
    store.new_attempt("r")  # the trainer restarts from its checkpoint at step 80
    write(store, "train/loss", range(81, 90), value=2.5, attempt=2)
    batch = read(store, cursor)
    assert list(batch.rows.series("train/loss").index) == list(range(81, 90))
    assert (batch.rows.series("train/loss") == 2.5).all()
    rep = batch.rows.repeats
    assert len(rep) == 18 and set(rep["attempt"]) == {1, 2}
    assert set(batch.attempts["attempt"]) == {2}
    write(store, "train/loss", range(90, 110), value=2.5, attempt=2)  # still replaying, then new steps
    batch = read(store, cursor)
    assert list(batch.rows.series("train/loss").index) == list(range(90, 110))
    assert len(batch.rows.repeats) == 20  # steps 90..99 were logged by both attempts
    assert read(store, cursor) is None


def test_a_long_run_is_read_in_windows(store):
    write(store, "train/loss", range(0, 2500))
    cursor = rows.Cursor()
    seen, more, passes = [], True, 0
    while more and passes < 10:
        batch = read(store, cursor, window=1000)
        seen += list(batch.rows.scalars.index)
        more, passes = batch.more, passes + 1
    assert seen == list(range(2500)) and passes == 3


def test_events_are_read_once(store):
    write(store, "train/loss", range(10))
    store.write_events("r", [{"step": 5, "kind": "checkpoint", "payload": {"path": "/ckpt/5"}}])
    cursor = rows.Cursor()
    batch = read(store, cursor)
    assert list(batch.rows.events["kind"]) == ["checkpoint"]
    store.write_events("r", [{"step": 9, "kind": "resume", "payload": {"restored_step": 5}}])
    batch = read(store, cursor)
    assert list(batch.rows.events["kind"]) == ["resume"] and batch.rows.scalars.empty


def test_nan_logged_by_the_run_is_told_apart_from_not_logged(store):
    write(store, "train/loss", range(5))
    write(store, "train/loss", [5], value=np.nan)
    write(store, "train/grad_norm", [6], value=1.0)
    batch = read(store, rows.Cursor())
    assert list(batch.rows.logged_nonfinite["step"]) == [5]
    assert list(batch.rows.series("train/loss").index) == [0, 1, 2, 3, 4, 5]


def test_events_ahead_of_the_rows_wait_for_them_while_catching_up(store):
    write(store, "train/loss", range(0, 3000))
    store.write_events("r", [{"step": 2500, "kind": "resume", "payload": {}},
                             {"step": 10, "kind": "checkpoint", "payload": {}}])
    cursor = rows.Cursor()
    first = read(store, cursor, window=1000)
    assert list(first.rows.events["step"]) == [10]
    second = read(store, cursor, window=1000)
    assert second.rows.events.empty
    third = read(store, cursor, window=1000)
    assert list(third.rows.events["step"]) == [2500] and not third.more
