"""SQLite writes go many rows a statement: sqlite3 lets go of the interpreter lock around every step
of a statement, and a writer thread beside a trainer's busy Python loop waits a switch interval to
get it back, so a statement a row stalls the client's writer (bench/RESULTS.md, "Client: a flat-out
writer"). What is checked here is the number of statements and that the rows land whole, never a
time."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from monitor.schema import MetricRows
from monitor.store import open_store
from monitor.store.database import insert_rows, sqlite_rows


def metric_rows(n: int, keys: int = 10) -> MetricRows:
    steps = np.repeat(np.arange(n // keys, dtype=np.int64), keys)
    codes = np.tile(np.arange(keys, dtype=np.int32), n // keys)
    values = steps * 0.5
    values[7] = np.nan
    return MetricRows(steps, codes, [f"train/m{i}" for i in range(keys)], values, np.full(n, 1e9),
                      np.ones(n, np.int64))


def statements_during(store, write) -> list[str]:
    seen: list[str] = []
    with store.atomic() as conn:
        raw = conn.connection.driver_connection
        raw.set_trace_callback(seen.append)
        try:
            write()
        finally:
            raw.set_trace_callback(None)
    return seen


def test_a_wide_write_takes_a_handful_of_statements_not_one_a_row(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        seen = statements_during(store, lambda: store.write_metrics("r", metric_rows(50_000)))
        # 50,000 rows of 10 series, their rollups (about 2% of the rows) and series marks.
        inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT")]
        assert len(inserts) < 40, len(inserts)
        assert store.count_rows("r") == 50_000
        logged = store.read_scalars(["r"], ["train/m7"], max_points=10_000)
        assert logged["value"].isna().sum() == 1 and len(logged) == 5_000


@pytest.mark.parametrize("limit", [999, 32766])
def test_rows_are_split_by_the_connections_parameter_bound(sqlite_url, limit):
    with open_store(sqlite_url) as store, store.atomic() as conn:
        raw = conn.connection.driver_connection
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
        raw.execute("CREATE TEMP TABLE pairs (a INTEGER PRIMARY KEY, b REAL)")
        rows = [(i, i / 2) for i in range(10_001)]
        assert sqlite_rows(conn, "INSERT INTO pairs (a, b) VALUES (?, ?) ON CONFLICT DO NOTHING", iter(rows)) == 10_001
        # Rows already there are left alone and not counted.
        assert sqlite_rows(conn, "INSERT INTO pairs (a, b) VALUES (?, ?) ON CONFLICT DO NOTHING", rows[:10]) == 0
        assert raw.execute("SELECT count(*), sum(a), max(b) FROM pairs").fetchone() == (10_001, 50_005_000, 5000.0)


def test_named_parameters_and_table_inserts_go_the_same_way(sqlite_url):
    with open_store(sqlite_url) as store, store.atomic() as conn:
        raw = conn.connection.driver_connection
        raw.execute("CREATE TEMP TABLE counts (k TEXT PRIMARY KEY, n INTEGER)")
        merge = "INSERT INTO counts (k, n) VALUES (:k, :n) ON CONFLICT (k) DO UPDATE SET n = counts.n + excluded.n"
        insert_rows(conn, merge, [{"n": 1, "k": "a"}, {"n": 2, "k": "b"}])
        insert_rows(conn, merge, [{"k": "a", "n": 5}])
        insert_rows(conn, merge, [])
        assert sorted(raw.execute("SELECT k, n FROM counts").fetchall()) == [("a", 6), ("b", 2)]


def test_rows_that_leave_a_column_to_its_default_get_it(sqlite_url):
    from sqlalchemy import Column, Integer, MetaData, String, Table

    counts = Table("tallies", MetaData(), Column("k", String, primary_key=True), Column("n", Integer, default=7))
    with open_store(sqlite_url) as store, store.atomic() as conn:
        counts.create(conn)
        insert_rows(conn, counts.insert(), [{"k": "a"}, {"k": "b"}])
        insert_rows(conn, counts.insert(), [{"k": "c", "n": 1}])
        assert sorted(conn.execute(counts.select()).all()) == [("a", 7), ("b", 7), ("c", 1)]
