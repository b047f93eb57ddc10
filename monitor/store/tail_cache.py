"""The rows this connection put into the row table's tail, kept so that sealing a chunk need not
read them back (SQLite: reading a live run's tail back cost about as much as writing it, and took
ingest below half the raw driver's rate).

Kept per database connection (`Connection.info`), filled only by inserts that stored every row
they were given (no row already there), and emptied by any rollback (database.py). Before use the
cached rows are checked against the table: the same count, step sum, attempt sum and latest wall
time in the range. Anything else (another process wrote or sealed the range, a run was deleted)
falls back to reading the rows.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Connection, Engine, and_, event, func, select

from monitor.store import tables
from monitor.store.chunks import ChunkRows

_INFO_KEY = "gapwatch_tail_rows"


def _cache(conn: Connection) -> dict:
    return conn.info.setdefault(_INFO_KEY, {})


def clear(conn_info: dict) -> None:
    conn_info.pop(_INFO_KEY, None)


def forgotten_on_rollback(engine: Engine) -> Engine:
    """`engine`, its connections forgetting the rows they remembered writing when a transaction
    rolls back (the rows are gone with it)."""
    @event.listens_for(engine, "rollback")
    def _rollback(conn) -> None:
        clear(conn.info)

    return engine


def add(conn: Connection, run_id: int, key_id: int, rows: ChunkRows) -> None:
    _cache(conn).setdefault((run_id, key_id), []).append(rows)


def forget(conn: Connection, run_id: int, key_id: int | None = None) -> None:
    cache = _cache(conn)
    for k in [k for k in cache if k[0] == run_id and (key_id is None or k[1] == key_id)]:
        del cache[k]


def take_many(conn: Connection, run_id: int, key_ids: list[int], lo: int,
              hi: int) -> dict[int, ChunkRows]:
    """The cached rows with lo <= step <= hi of each series whose rows there are exactly the
    table's (one query for them all); the rows leave the cache either way (the caller seals the
    range). A series missing from the answer is read from the table."""
    cached = {}
    for key_id in key_ids:
        rows = _pop(conn, run_id, key_id, lo, hi)
        if rows is not None:
            cached[key_id] = rows
    if not cached:
        return {}
    m = tables.metrics.c
    found = conn.execute(
        select(m.key_id, func.count(), func.sum(m.step), func.sum(m.attempt), func.max(m.wall_time))
        .where(and_(m.run_id == run_id, m.key_id.in_(list(cached)), m.step >= lo, m.step <= hi))
        .group_by(m.key_id)
    ).all()
    exact = {}
    for key_id, n, step_sum, attempt_sum, last_wall in found:
        rows = cached[int(key_id)]
        if n != len(rows) or n == 0:
            continue
        duplicate = (rows.steps[1:] == rows.steps[:-1]) & (rows.attempts[1:] == rows.attempts[:-1])
        if duplicate.any() or int(step_sum) != int(rows.steps.sum()) \
                or int(attempt_sum) != int(rows.attempts.sum()) \
                or float(last_wall) != float(rows.wall_times.max()):
            continue
        exact[int(key_id)] = rows
    return exact


def _pop(conn: Connection, run_id: int, key_id: int, lo: int, hi: int) -> ChunkRows | None:
    """The cached rows of one series with lo <= step <= hi, in (step, attempt) order; later rows
    stay cached."""
    parts = _cache(conn).pop((run_id, key_id), None)
    if not parts:
        return None
    steps = np.concatenate([p.steps for p in parts])
    order = np.lexsort((np.concatenate([p.attempts for p in parts]), steps))
    rows = ChunkRows(*(np.concatenate([getattr(p, f) for p in parts])[order]
                       for f in ("steps", "attempts", "values", "wall_times")))
    inside = (rows.steps >= lo) & (rows.steps <= hi)
    later = ~inside & (rows.steps > hi)
    if later.any():
        add(conn, run_id, key_id, ChunkRows(rows.steps[later], rows.attempts[later], rows.values[later],
                                            rows.wall_times[later]))
    return ChunkRows(rows.steps[inside], rows.attempts[inside], rows.values[inside], rows.wall_times[inside])
