"""Sealed chunks and the row table's tail hold a series together exactly as one row table would:
checked against a plain model of first-write-wins rows, on both backends, through restarts,
replays and re-imports, and across the upgrade of a store written before chunks existed."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, insert, select

from monitor.store import KeyRange, chunks, migrations, open_store, tables
from monitor.store.database import engine_for, resolve

KEY = "train/loss"


def batch(steps, attempt, value_of):
    steps = list(steps)
    return pd.DataFrame({"step": steps, "key": KEY, "value": [value_of(s, attempt) for s in steps],
                         "attempt": attempt})


def model_write(model: dict, frame: pd.DataFrame) -> None:
    for step, attempt, value in zip(frame["step"], frame["attempt"], frame["value"]):
        model.setdefault((int(step), int(attempt)), float(value))


def log(store, model: dict, steps, attempt, value_of) -> None:
    """Write a batch to run "r" and to the plain model of it."""
    frame = batch(steps, attempt, value_of)
    store.write_metrics("r", frame)
    model_write(model, frame)


def tail_steps(store, run: str) -> list[int]:
    with store.engine.connect() as conn:
        m = tables.metrics.c
        return [s for (s,) in conn.execute(select(m.step).where(m.run_id == store.run_id(run)))]


def check_against(store, run: str, model: dict) -> None:
    pairs = sorted(model)
    assert store.count_rows(run) == len(pairs)
    # Every attempt of every step, as the watch service reads them.
    rows = store.read_attempt_rows(run, [KEY], 0, 10**9)[KEY]
    assert list(zip(rows.steps.tolist(), rows.attempts.tolist())) == pairs
    assert rows.values.tolist() == [model[p] for p in pairs]
    # The latest attempt of each step, as detection loads it.
    latest = {}
    for step, attempt in pairs:
        latest[step] = model[(step, attempt)]
    series = store.load_run(run).series(KEY)
    assert series.index.tolist() == sorted(latest) and series.tolist() == [latest[s] for s in sorted(latest)]
    marks = store.series_marks(run)[KEY]
    assert (marks.first_step, marks.last_step) == (min(latest), max(latest))
    # The row table holds only the chunk of the last step, and none once that step ends its chunk.
    boundary = chunks.CHUNK_STEPS * ((max(latest) + 1) // chunks.CHUNK_STEPS)
    assert all(s >= boundary for s in tail_steps(store, run))


def test_rows_move_into_chunks_and_read_back_exactly(store_url):
    model: dict = {}
    with open_store(store_url) as store:
        store.ensure_run("r")
        for lo in range(0, 1000, 90):  # a live run: batches smaller than a chunk
            frame = batch(range(lo, lo + 90), 1, lambda s, a: s / 7)
            store.write_metrics("r", frame)
            model_write(model, frame)
        check_against(store, "r", model)
        assert len(tail_steps(store, "r")) < chunks.CHUNK_STEPS
        # A restart from step 700: attempt 2 logs sealed steps again, and more.
        frame = batch(range(700, 1200), 2, lambda s, a: -s)
        store.write_metrics("r", frame)
        model_write(model, frame)
        check_against(store, "r", model)
        assert len(store.load_run("r").repeats) == 2 * (1080 - 700)  # attempt 1 logged up to 1079
        # A replay of both attempts over every step: the first value of a (step, attempt) stays.
        for attempt in (1, 2):
            frame = batch(range(0, 1200), attempt, lambda s, a: 99.0)
            store.write_metrics("r", frame)
            model_write(model, frame)
        check_against(store, "r", model)
        assert store.count_rows("r") == 2400 and model[(5, 1)] == 5 / 7 and model[(5, 2)] == 99.0
        # The watch service's replay read: at steps up to 900 only attempt 2 and later.
        replayed = store.read_key_rows("r", [KeyRange(KEY, after=650, upto=1000, seen=900, replay_attempt=2)])[KEY]
        assert set(replayed.attempts[replayed.steps <= 900].tolist()) == {2}
        assert set(replayed.attempts[replayed.steps > 900].tolist()) == {1, 2}
        assert replayed.steps.min() == 651 and replayed.steps.max() == 1000


def test_a_rarely_logged_series_reads_back_exactly_through_restarts(store_url):
    """A few rows in each of many chunks (an eval every few steps), decoded a run of chunks at a
    time: the rows, attempts and repeats come back as written."""
    model: dict = {}
    with open_store(store_url) as store:
        store.ensure_run("r")
        for attempt, steps in ((1, range(0, 2000, 11)), (2, range(990, 3000, 11))):
            frame = batch(steps, attempt, lambda s, a: s / 3 + a)
            store.write_metrics("r", frame)
            model_write(model, frame)
        check_against(store, "r", model)
        assert len(store.load_run("r").repeats) == 2 * len(range(990, 2000, 11))


def test_point_budget_reads_cross_chunks_and_tail(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        values = np.sin(np.arange(5000) / 50.0)
        values[4321] = 50.0  # a spike in a sealed chunk must survive downsampling
        store.write_metrics("r", pd.DataFrame({"step": np.arange(5000), "key": KEY, "value": values}))
        every = store.read_scalars("r", KEY, max_points=10_000)
        assert every["step"].tolist() == list(range(5000)) and every["value"].tolist() == values.tolist()
        thin = store.read_scalars("r", KEY, max_points=100)
        assert len(thin) <= 100 and 4321 in thin["step"].tolist()
        # Its right edge is the last logged value, whether the tail or a chunk holds it.
        assert thin["step"].iloc[-1] == 4999
        edge = store.read_scalars("r", KEY, step_range=(0, 4000), max_points=100)
        assert edge["step"].iloc[-1] == 4000


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 600), st.integers(1, 250), st.integers(1, 3)), min_size=1, max_size=8))
def test_any_order_of_batches_matches_one_row_table(sqlite_url, writes):
    with open_store(sqlite_url) as store:
        if store.get_run("h") is not None:
            store.delete_run("h")
        store.ensure_run("h")
        model: dict = {}
        for start, length, attempt in writes:
            frame = batch(range(start, start + length), attempt, lambda s, a: s * 10.0 + a + len(model))
            store.write_metrics("h", frame)
            model_write(model, frame)
        check_against(store, "h", model)


def test_a_store_written_before_chunks_is_sealed_on_upgrade(sqlite_url):
    """Version 1 kept every row in the row table; opening it seals them without losing any."""
    store_url = resolve(sqlite_url)
    engine = engine_for(store_url)
    steps = np.arange(300)
    with engine.begin() as conn:
        migrations.upgrade(conn, migrations.MIGRATIONS[:1])
        conn.execute(insert(tables.runs).values(id=1, name="old", source="gapwatch", config="{}", status="running",
                                                attempts=2, created_at=0.0, updated_at=0.0))
        conn.execute(insert(tables.metric_keys).values(id=1, name=KEY))
        conn.execute(insert(tables.metrics), [
            {"run_id": 1, "key_id": 1, "step": int(s), "attempt": a, "value": float(s * a), "wall_time": 1.0}
            for a in (1, 2) for s in steps if a == 1 or s >= 250])
        conn.execute(insert(tables.series).values(run_id=1, key_id=1, first_step=0, last_step=299, n=300,
                                                  last_wall_time=1.0))
    engine.dispose()
    with open_store(sqlite_url) as store:
        assert store.schema_version() == migrations.SCHEMA_VERSION
        model = {(int(s), 1): float(s) for s in steps}
        model.update({(int(s), 2): float(2 * s) for s in steps if s >= 250})
        check_against(store, "old", model)
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(tables.metric_chunks)).scalar_one() == 4


def test_a_chunk_is_sealed_once_its_last_step_is_logged(store_url):
    """A write that ends on a chunk's last step leaves nothing in the row table (an import
    writes whole chunks); a later write into that chunk, a restart, merges into it."""
    width = chunks.CHUNK_STEPS
    model: dict = {}
    with open_store(store_url) as store:
        store.ensure_run("r")
        log(store, model, range(0, 2 * width), 1, lambda s, a: s / 3)
        check_against(store, "r", model)
        assert tail_steps(store, "r") == []
        log(store, model, range(2 * width, 2 * width + 5), 1, lambda s, a: s / 3)
        assert sorted(tail_steps(store, "r")) == list(range(2 * width, 2 * width + 5))
        log(store, model, range(width - 3, 2 * width + 9), 2, lambda s, a: -s)  # a restart over both
        check_against(store, "r", model)


def test_a_store_that_kept_a_complete_chunk_in_the_row_table_seals_it_on_upgrade(sqlite_url):
    """Version 5 sealed a chunk only once a later step was logged: a series that stopped on a
    chunk's last step kept that chunk in the row table. Opening such a store seals it."""
    width = chunks.CHUNK_STEPS
    model: dict = {}
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        log(store, model, range(0, 2 * width), 1, lambda s, a: s / 3)
        with store.engine.connect() as conn:
            run_id, key_id = store.run_id("r"), store.key_ids(conn, [KEY])[KEY]
    # The layout version 5 left: the last chunk's rows back in the row table.
    engine = engine_for(resolve(sqlite_url))
    c = tables.metric_chunks.c
    with engine.begin() as conn:
        last = chunks.read(conn, run_id, [key_id], chunks=[1], with_wall_times=True)
        ((_, _, rows),) = list(last)
        conn.execute(tables.metric_chunks.delete().where((c.run_id == run_id) & (c.chunk == 1)))
        conn.execute(insert(tables.metrics), [
            {"run_id": run_id, "key_id": key_id, "step": int(s), "attempt": int(a), "value": float(v),
             "wall_time": float(w)} for s, a, v, w in zip(rows.steps, rows.attempts, rows.values, rows.wall_times)])
        conn.execute(tables.meta.update().where(tables.meta.c.key == "schema_version").values(value="5"))
        assert conn.execute(select(func.count()).select_from(tables.metrics)).scalar_one() == width
    engine.dispose()
    with open_store(sqlite_url) as store:
        assert tail_steps(store, "r") == []
        check_against(store, "r", model)
        log(store, model, range(2 * width, 2 * width + 3), 1, lambda s, a: s / 3)
        check_against(store, "r", model)


def test_the_chunk_width_is_the_stores_not_the_codes(sqlite_url, monkeypatch):
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", batch(range(500), 1, lambda s, a: float(s)))
    monkeypatch.setattr(chunks, "CHUNK_STEPS", 8192)  # a later gapwatch with another default
    with open_store(sqlite_url, read_only=True) as store:
        assert store.load_run("r").series(KEY).tolist() == [float(s) for s in range(500)]
    with open_store(sqlite_url) as store:
        store.write_metrics("r", batch(range(500, 600), 1, lambda s, a: float(s)))
        model = {(s, 1): float(s) for s in range(600)}
        monkeypatch.setattr(chunks, "CHUNK_STEPS", 64)  # check_against's boundary uses the store's
        check_against(store, "r", model)


def test_chunks_compressed_with_zlib_by_an_earlier_gapwatch_read_and_merge(store_url):
    """A store whose chunks an earlier gapwatch compressed with zlib: its rows read back exactly,
    and a write into such a chunk merges with them and stores the result with zstd."""
    blobs = ("step_data", "attempt_data", "value_data", "wall_time_data")
    model: dict = {}
    with open_store(store_url) as store:
        store.ensure_run("r")
        frame = batch(range(600), 1, lambda s, a: s / 7)
        store.write_metrics("r", frame)
        model_write(model, frame)
        c = tables.metric_chunks.c
        with store.engine.begin() as conn:
            stored = conn.execute(select(c.run_id, c.key_id, c.chunk, *(c[b] for b in blobs))).all()
            assert len(stored) > 2 and all(bytes(row[3])[:4] == chunks._ZSTD_MAGIC for row in stored)
            for run_id, key_id, chunk, *data in stored:
                as_zlib = {b: zlib.compress(chunks._unpack(bytes(d)), 1) for b, d in zip(blobs, data)}
                conn.execute(tables.metric_chunks.update().where(
                    (c.run_id == run_id) & (c.key_id == key_id) & (c.chunk == chunk)).values(**as_zlib))
        check_against(store, "r", model)
        frame = batch(range(0, 600, 5), 2, lambda s, a: -float(s))  # a restart over sealed chunks
        store.write_metrics("r", frame)
        model_write(model, frame)
        check_against(store, "r", model)
        with store.engine.connect() as conn:
            firsts = [bytes(d)[:4] for (d,) in conn.execute(select(c.value_data))]
        assert firsts and all(first == chunks._ZSTD_MAGIC for first in firsts)


def test_sealing_from_remembered_rows_notices_other_writers_and_rollbacks(store_url):
    """A connection seals from the rows it remembers writing (tail_cache.py) only while they are
    exactly the table's: two stores writing one series in turn, and a rolled-back batch, still
    seal every row there is and no row that is not."""
    model: dict = {}
    with open_store(store_url) as a, open_store(store_url) as b:
        a.ensure_run("r")
        for i, lo in enumerate(range(0, 900, 50)):
            frame = batch(range(lo, lo + 50), 1, lambda s, at: s + 0.5)
            (a if i % 3 else b).write_metrics("r", frame)
            model_write(model, frame)
            if i == 7:
                with pytest.raises(RuntimeError), a.atomic():
                    a.write_metrics("r", batch(range(lo + 50, lo + 60), 1, lambda s, at: -1.0))
                    raise RuntimeError("the import failed")
        check_against(a, "r", model)
        check_against(b, "r", model)


def _statements_of_a_write(store, frame) -> int:
    """SQL statements one write_metrics call sends (an executemany counts once)."""
    from sqlalchemy import event

    seen = []

    def count(*_):
        seen.append(1)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        store.write_metrics("r", frame)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    return len(seen)


def _wide(steps, width: int) -> pd.DataFrame:
    steps = np.asarray(list(steps))
    return pd.DataFrame({"step": np.repeat(steps, width),
                         "key": np.tile([f"m/k{i}" for i in range(width)], len(steps)),
                         "value": np.arange(len(steps) * width, dtype=float)})


@pytest.mark.parametrize("width", [4, 64])
def test_sealing_a_write_takes_as_many_statements_whatever_its_width(sqlite_url, width):
    """A write that closes chunks of many series seals them together: its statements do not
    grow with the number of series (a statement per series per write took most of a wide
    import's time)."""
    per_width = {}
    for n in (width, 2 * width):
        with open_store(sqlite_url.replace(".db", f"-{n}.db")) as store:
            store.ensure_run("r")
            store.write_metrics("r", _wide(range(0, chunks.CHUNK_STEPS + 10, 7), n))
            # Moves each series' tail into its chunk and seals the next chunk straight away.
            per_width[n] = _statements_of_a_write(
                store, _wide(range(chunks.CHUNK_STEPS + 17, 2 * chunks.CHUNK_STEPS + 10, 7), n))
            rows = store.load_run("r").scalars
            assert rows.shape == (len(range(0, 2 * chunks.CHUNK_STEPS + 10, 7)), n)
            assert all(s >= 2 * chunks.CHUNK_STEPS for s in tail_steps(store, "r"))
    assert per_width[2 * width] == per_width[width]
