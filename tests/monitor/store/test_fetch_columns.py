"""Reads of many rows as columns (database.fetch_columns): on SQLite a read's rows come back as one
row of texts, so that a read beside a busy thread waits out one switch interval, not one a row
(bench/RESULTS.md, "SQLite reads beside a busy thread"). What is checked here is that every
value comes back exactly, in order, on both backends, and that a read is one row on SQLite."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from monitor.store import open_store
from monitor.store.database import fetch_columns


def doubles(n: int, seed: int = 0) -> np.ndarray:
    """Random bit patterns (every exponent, subnormals among them), ordinary losses, and the edges."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**63 - 1, n, dtype=np.int64).view(np.float64)
    bits = bits[np.isfinite(bits)]
    edges = [np.inf, -np.inf, 0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 1 / 3]
    return np.concatenate([bits, -bits[: n // 4], rng.normal(3.0, 0.5, n), edges])


@pytest.fixture
def filled(store_url):
    """A store with a table of (id, step, value) rows, the last value NULL; and those rows."""
    values = doubles(5_000)
    ids = np.arange(values.size + 1, dtype=np.int64)
    steps = (ids * 7919) % 1000 - 500  # unordered, negative and repeated
    with open_store(store_url) as store:
        with store.atomic() as conn:
            conn.exec_driver_sql("CREATE TABLE probe (id BIGINT PRIMARY KEY, step BIGINT NOT NULL, "
                                 "value DOUBLE PRECISION)")
            mark = "?" if conn.dialect.name == "sqlite" else "%s"
            conn.connection.driver_connection.cursor().executemany(
                f"INSERT INTO probe VALUES ({mark}, {mark}, {mark})",
                [(int(i), int(s), None if i == values.size else float(values[i])) for i, s in zip(ids, steps)])
        yield store, ids, steps, np.append(values, np.nan)


def test_every_value_comes_back_exactly_and_null_as_nan(filled):
    store, ids, steps, values = filled
    with store.atomic() as conn:
        got_ids, got_steps, got_values = fetch_columns(conn, "SELECT id, step, value FROM probe ORDER BY id", (),
                                                       [np.int64, np.int64, float], order=1)
    assert got_ids.dtype == np.int64 and got_values.dtype == float
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_steps, steps)
    assert np.array_equal(got_values, values, equal_nan=True)
    assert np.isnan(got_values[-1]) and np.isinf(got_values[:-1]).sum() == 2


def test_rows_come_sorted_by_the_leading_columns_whatever_the_query_picks(filled):
    store, ids, steps, values = filled
    with store.atomic() as conn:
        # The newest 100 ids by a descending ORDER BY and LIMIT, back in ascending (step, id) order.
        got_steps, got_ids = fetch_columns(conn, "SELECT step, id FROM probe WHERE step >= ? ORDER BY id DESC "
                                                 "LIMIT 100", (-500,), [np.int64, np.int64], order=2)
    newest = ids[-100:]
    expected = np.lexsort((newest, steps[-100:]))
    np.testing.assert_array_equal(got_ids, newest[expected])
    np.testing.assert_array_equal(got_steps, steps[-100:][expected])


def test_no_rows_give_empty_columns_of_their_dtypes(filled):
    store, *_ = filled
    with store.atomic() as conn:
        got = fetch_columns(conn, "SELECT id, value FROM probe WHERE id < ?", (0,), [np.int64, float], order=1)
    assert [c.size for c in got] == [0, 0] and [c.dtype for c in got] == [np.dtype(np.int64), np.dtype(float)]


def test_a_null_in_an_integer_column_is_refused_on_sqlite(sqlite_url):
    with open_store(sqlite_url) as store, store.atomic() as conn:
        conn.exec_driver_sql("CREATE TABLE probe (id INTEGER, step INTEGER)")
        conn.exec_driver_sql("INSERT INTO probe VALUES (1, 10), (2, NULL)")
        with pytest.raises(ValueError, match="holds NULL"):
            fetch_columns(conn, "SELECT id, step FROM probe", (), [np.int64, np.int64])


def test_a_read_of_many_rows_is_one_aggregate_statement_on_sqlite(sqlite_url):
    with open_store(sqlite_url) as store, store.atomic() as conn:
        conn.exec_driver_sql("CREATE TABLE probe (id INTEGER, value REAL)")
        raw = conn.connection.driver_connection
        raw.executemany("INSERT INTO probe VALUES (?, ?)", [(i, i / 3) for i in range(10_000)])
        seen: list[str] = []
        raw.set_trace_callback(seen.append)
        try:
            ids, values = fetch_columns(conn, "SELECT id, value FROM probe ORDER BY id", (), [np.int64, float],
                                        order=1)
        finally:
            raw.set_trace_callback(None)
    assert ids.size == 10_000 and values[3] == 1.0
    # One statement, an aggregate without GROUP BY: it answers one row, whatever the rows it reads.
    assert len(seen) == 1 and "group_concat" in seen[0] and "GROUP BY" not in seen[0].upper(), seen


def test_rows_past_sqlites_length_limit_are_fetched_row_by_row(sqlite_url):
    with open_store(sqlite_url) as store, store.atomic() as conn:
        conn.exec_driver_sql("CREATE TABLE probe (id INTEGER, value REAL)")
        raw = conn.connection.driver_connection
        raw.executemany("INSERT INTO probe VALUES (?, ?)", [(i, i / 3) for i in range(1_000)])
        limit = raw.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 5_000)  # the 1,000 values' text is ~27,000 bytes
        try:
            ids, values = fetch_columns(conn, "SELECT id, value FROM probe", (), [np.int64, float], order=1)
        finally:
            raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
    np.testing.assert_array_equal(ids, np.arange(1_000))
    np.testing.assert_array_equal(values, np.arange(1_000) / 3)
