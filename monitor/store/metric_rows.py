"""Reads of logged metric rows, every attempt of each (run, key, step): the one module that knows
where they are kept (sealed chunks, then the row table's write tail; see chunks.py), for the
reader, the watch service's incremental reads and the writer.

Every read is a range of one series (run, key) in step order, equal steps by attempt.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from sqlalchemy import Connection, and_, func, select

from monitor.store import chunks, tables
from monitor.store.chunks import ChunkRows
from monitor.store.database import fetch_columns
from monitor.store.run_frames import KeyRows, empty_rows, union_steps

_m = tables.metrics.c


_TAIL_QUERY = (f"SELECT step, attempt, value, wall_time FROM {tables.metrics.name} WHERE run_id = ? AND key_id = ? "
               "AND step >= ? AND step <= ? ORDER BY step, attempt")
# PostgreSQL: each column as one bytea of its big-endian binary values (NULL values sent as NaN),
# so a range of rows crosses the wire as a few values that NumPy reads as they are.
_PG_COLUMNS = (("int8send", "step", ">i8"), ("int4send", "attempt", ">i4"),
               ("float8send", "coalesce(value, 'NaN'::float8)", ">f8"), ("float8send", "wall_time", ">f8"))


def _pg_packed(width: int) -> str:
    """The first `width` of _PG_COLUMNS as binary aggregates, in (step, attempt) order."""
    return ", ".join(f"string_agg({send}({col}), ''::bytea ORDER BY step, attempt)"
                     for send, col, _ in _PG_COLUMNS[:width])


def _pg_unpacked(packed: tuple) -> list[np.ndarray]:
    """The columns of _pg_packed's aggregates (None: no rows) as int64 and float arrays."""
    return [np.frombuffer(b or b"", fmt).astype(np.int64 if fmt[1] == "i" else float)
            for b, (_, _, fmt) in zip(packed, _PG_COLUMNS)]


_PG_TAIL_QUERY = (f"SELECT {_pg_packed(4)} FROM {tables.metrics.name} "
                  "WHERE run_id = %s AND key_id = %s AND step >= %s AND step <= %s")


def tail_rows(conn: Connection, run_id: int, key_id: int, lo: int, hi: int) -> ChunkRows:
    """Rows of the row table (not yet sealed in chunks) with lo <= step <= hi, wall times too:
    what sealing a chunk moves. Sealing reads back every row a live run wrote: on PostgreSQL they
    come as four binary aggregates (fetching row by row cost more than writing the rows had)."""
    if conn.dialect.name == "postgresql":
        with conn.connection.driver_connection.cursor() as cur:
            return ChunkRows(*_pg_unpacked(cur.execute(_PG_TAIL_QUERY, (run_id, key_id, lo, hi)).fetchone()))
    return ChunkRows(*fetch_columns(conn, _TAIL_QUERY, (run_id, key_id, lo, hi),
                                    [np.int64, np.int64, float, float], order=2))


def _tail_where(run_id: int, key_ids: list[int], lo: int | None, hi: int | None,
                replay: tuple[int, int] | None) -> tuple[str, list[int]]:
    """The WHERE clause (`?` marks) and parameters of a read of these series' rows in the row
    table, lo <= step <= hi (either open); `replay` as in series_rows."""
    where = ["run_id = ?", f"key_id IN ({', '.join('?' * len(key_ids))})"]
    params = [int(run_id), *(int(k) for k in key_ids)]
    for clause, value in (("step >= ?", lo), ("step <= ?", hi)):
        if value is not None:
            where.append(clause)
            params.append(int(value))
    if replay is not None:
        where.append("(step > ? OR attempt >= ?)")
        params += [int(x) for x in replay]
    return " AND ".join(where), params


def _tail(conn: Connection, run_id: int, key_id: int, lo: int | None, hi: int | None,
          replay: tuple[int, int] | None = None) -> KeyRows:
    """One series' rows in the row table, in (step, attempt) order."""
    where, params = _tail_where(run_id, [key_id], lo, hi, replay)
    return KeyRows(*fetch_columns(conn, f"SELECT step, attempt, value FROM {tables.metrics.name} WHERE {where} "
                                        "ORDER BY step, attempt", params, [np.int64, np.int64, float], order=2))


def _joined(parts: list[KeyRows]) -> KeyRows:
    """Chunks in order, then the tail: already in (step, attempt) order, since a step's rows live
    in one place and the tail lies past every sealed chunk."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_rows()
    if len(parts) == 1:
        return KeyRows(parts[0].steps, parts[0].attempts, parts[0].values)
    return KeyRows(np.concatenate([p.steps for p in parts]), np.concatenate([p.attempts for p in parts]),
                   np.concatenate([p.values for p in parts]))


def _trim(rows: ChunkRows, lo: int | None, hi: int | None) -> ChunkRows:
    if not len(rows) or ((lo is None or rows.steps[0] >= lo) and (hi is None or rows.steps[-1] <= hi)):
        return rows
    a = 0 if lo is None else int(np.searchsorted(rows.steps, lo, "left"))
    b = len(rows) if hi is None else int(np.searchsorted(rows.steps, hi, "right"))
    return ChunkRows(rows.steps[a:b], rows.attempts[a:b], rows.values[a:b])


def series_rows(conn: Connection, run_id: int, key_id: int, lo: int | None = None, hi: int | None = None,
                replay: tuple[int, int] | None = None) -> KeyRows:
    """Rows of one series with lo <= step <= hi (either open). `replay` = (seen, attempt) keeps,
    at steps up to `seen`, only rows of that attempt or later: what a replaying attempt logged
    again, not what was read before."""
    parts = [_trim(rows, lo, hi) for rows in chunks.read_series(conn, run_id, key_id, lo, hi)]
    out = _joined(parts + [_tail(conn, run_id, key_id, lo, hi, replay)])
    if replay is not None and len(out):
        keep = (out.steps > replay[0]) | (out.attempts >= replay[1])
        if not keep.all():
            out = KeyRows(out.steps[keep], out.attempts[keep], out.values[keep])
    return out


def many_series_rows(conn: Connection, run_id: int, key_ids: list[int], lo: int | None, hi: int | None,
                     replay: tuple[int, int] | None = None) -> dict[int, KeyRows]:
    """`series_rows` of several series over one range, in two queries instead of two a series
    (the watch service reads a poll's new rows of every series of a run, mostly at one cursor)."""
    out: dict[int, list[KeyRows]] = {k: [] for k in key_ids}
    for key_id, _, rows in chunks.read(conn, run_id, key_ids, lo, hi):
        out[key_id].append(_trim(rows, lo, hi))
    tails = _tails(conn, run_id, key_ids, lo, hi, replay)
    joined = {}
    for key_id in key_ids:
        rows = _joined(out[key_id] + [tails.get(key_id, empty_rows())])
        if replay is not None and len(rows):
            keep = (rows.steps > replay[0]) | (rows.attempts >= replay[1])
            rows = KeyRows(rows.steps[keep], rows.attempts[keep], rows.values[keep])
        joined[key_id] = rows
    return joined


def _tails(conn: Connection, run_id: int, key_ids: list[int], lo: int | None, hi: int | None,
           replay: tuple[int, int] | None) -> dict[int, KeyRows]:
    """The row table's rows of these series in one query, per series in (step, attempt) order. On
    PostgreSQL each series' columns come as binary aggregates (_PG_TAIL_QUERY's way), a row a
    series instead of a row a value, which the watch service's every read of a poll's new rows
    would otherwise fetch one by one."""
    where, params = _tail_where(run_id, key_ids, lo, hi, replay)
    if conn.dialect.name == "postgresql":
        query = (f"SELECT key_id, {_pg_packed(3)} FROM {tables.metrics.name} "
                 f"WHERE {where.replace('?', '%s')} GROUP BY key_id")
        with conn.connection.driver_connection.cursor() as cur:
            found = cur.execute(query, params).fetchall()
        return {int(key_id): KeyRows(*_pg_unpacked(packed)) for key_id, *packed in found}
    keys, steps, attempts, values = fetch_columns(
        conn, f"SELECT key_id, step, attempt, value FROM {tables.metrics.name} WHERE {where} "
              "ORDER BY key_id, step, attempt", params, [np.int64, np.int64, np.int64, float], order=3)
    bounds = np.searchsorted(keys, key_ids, "left"), np.searchsorted(keys, key_ids, "right")
    return {key_id: KeyRows(steps[a:b], attempts[a:b], values[a:b]) for key_id, a, b in zip(key_ids, *bounds)}


def series_parts(conn: Connection, run_id: int, key_id: int) -> Iterator[KeyRows]:
    """Every row of one series, a sealed chunk at a time and then the write tail, in (step,
    attempt) order; a step's rows all lie in one part. For a full load, which places each part
    in its frame as it comes instead of joining a 1.4M-row series first."""
    for rows in chunks.read_series(conn, run_id, key_id):
        yield KeyRows(rows.steps, rows.attempts, rows.values)
    yield _tail(conn, run_id, key_id, None, None)


def logged_steps(conn: Connection, run_id: int, key_ids: list[int]) -> np.ndarray:
    """Every step at which any of these series logged a row, sorted and distinct: the step axis
    of a run's frame, known before a value is read."""
    if not key_ids:
        return np.empty(0, np.int64)
    where, params = _tail_where(run_id, key_ids, None, None, None)
    tail, = fetch_columns(conn, f"SELECT DISTINCT step FROM {tables.metrics.name} WHERE {where} ORDER BY step",
                          params, [np.int64], order=1)
    return union_steps([chunks.logged_steps(conn, run_id, key_ids), tail])


def latest_tail(conn: Connection, run_id: int, key_id: int, lo: int, hi: int, rows: int = 64):
    """The last few logged steps of a range (latest attempt each), newest last."""
    where, params = _tail_where(run_id, [key_id], lo, hi, None)
    steps, _, values = fetch_columns(conn, f"SELECT step, attempt, value FROM {tables.metrics.name} WHERE {where} "
                                           f"ORDER BY step DESC, attempt DESC LIMIT {int(rows)}",
                                     params, [np.int64, np.int64, float], order=2)
    seen: dict[int, float] = {}
    for step, value in zip(steps[::-1].tolist(), values[::-1].tolist()):  # newest first: a step's latest attempt
        seen.setdefault(step, value)
    if len(steps) < rows:  # the range's tail rows are all here: it reaches into sealed chunks
        seen.update(_newest_sealed(conn, run_id, key_id, lo, hi, rows - len(seen)))
    steps = np.array(sorted(seen)[-rows:], dtype=np.int64)
    return steps, np.array([seen[k] for k in steps.tolist()], dtype=float)


def _newest_sealed(conn: Connection, run_id: int, key_id: int, lo: int, hi: int, wanted: int) -> dict[int, float]:
    """The latest value of at least `wanted` of the newest sealed steps in [lo, hi] (fewer if the
    range has fewer): a couple of chunks hold them unless the metric is sparse, then more."""
    limit = 2
    while True:
        found: dict[int, float] = {}
        newest = list(chunks.read(conn, run_id, [key_id], lo, hi, descending=True, limit=limit))
        for _, _, sealed in newest:
            trimmed = _trim(sealed, lo, hi)
            steps, values = KeyRows(trimmed.steps, trimmed.attempts, trimmed.values).latest()
            found.update(zip(steps.tolist(), values.tolist()))
        if len(found) >= wanted or len(newest) < limit:
            return found
        limit *= 16


def latest_attempt(conn: Connection, run_id: int, key_id: int, step: int) -> int | None:
    """The highest attempt that logged this step of the series; None if none did."""
    found = conn.execute(select(func.max(_m.attempt)).where(
        and_(_m.run_id == run_id, _m.key_id == key_id, _m.step == step))).scalar()
    if found is not None:
        return found
    for _, _, sealed in chunks.read(conn, run_id, [key_id], step, step):
        at = sealed.attempts[sealed.steps == step]
        if len(at):
            return int(at.max())
    return None


def count(conn: Connection, run_id: int) -> int:
    """Rows stored for a run, every attempt counted."""
    tail = conn.execute(select(func.count()).select_from(tables.metrics).where(_m.run_id == run_id)).scalar_one()
    return int(tail) + chunks.count(conn, run_id)
