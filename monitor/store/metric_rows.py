"""Reads of logged metric rows, every attempt of each (run, key, step): the one module that knows
where they are kept, for the reader, the watch service's incremental reads and the writer.

Every read is a range of one series (run, key) in step order, equal steps by attempt.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Connection, and_, func, or_, select

from monitor.store import tables
from monitor.store.run_frames import KeyRows, empty_rows

_m = tables.metrics.c


def _arrays(rows: list, columns: int) -> list[np.ndarray]:
    # fromiter over the rows: np.array(rows) probes each SQLAlchemy Row as a mapping first, which
    # raises and catches a KeyError per row and costs ~30 us a row (1.2 s for 36k rows).
    out = []
    for i in range(columns):
        if i == columns - 1:
            out.append(np.fromiter((np.nan if r[i] is None else r[i] for r in rows), dtype=float, count=len(rows)))
        else:
            out.append(np.fromiter((r[i] for r in rows), dtype=np.int64, count=len(rows)))
    return out


def series_rows(conn: Connection, run_id: int, key_id: int, lo: int | None = None, hi: int | None = None,
                replay: tuple[int, int] | None = None) -> KeyRows:
    """Rows of one series with lo <= step <= hi (either open). `replay` = (seen, attempt) keeps,
    at steps up to `seen`, only rows of that attempt or later: what a replaying attempt logged
    again, not what was read before."""
    cond = and_(_m.run_id == run_id, _m.key_id == key_id)
    if lo is not None:
        cond = and_(cond, _m.step >= lo)
    if hi is not None:
        cond = and_(cond, _m.step <= hi)
    if replay is not None:
        cond = and_(cond, or_(_m.step > replay[0], _m.attempt >= replay[1]))
    rows = conn.execute(select(_m.step, _m.attempt, _m.value).where(cond).order_by(_m.step, _m.attempt)).all()
    if not rows:
        return empty_rows()
    return KeyRows(*_arrays(rows, 3))


def run_rows(conn: Connection, run_id: int, key_ids: list[int] | None = None) -> dict[int, KeyRows]:
    """Every row of a run (or of some of its keys), per key id."""
    cond = _m.run_id == run_id
    if key_ids is not None:
        cond = and_(cond, _m.key_id.in_(key_ids))
    result = conn.execute(select(_m.key_id, _m.step, _m.attempt, _m.value).where(cond)
                          .order_by(_m.key_id, _m.step, _m.attempt))
    # Plain tuples: pandas and NumPy probe each SQLAlchemy Row as a mapping (a caught KeyError a row).
    rows = [tuple(r) for r in result]
    if not rows:
        return {}
    key_col, steps, attempts, values = _arrays(rows, 4)
    starts = np.flatnonzero(np.r_[True, key_col[1:] != key_col[:-1]])
    ends = np.r_[starts[1:], len(key_col)]
    return {int(key_col[lo]): KeyRows(steps[lo:hi], attempts[lo:hi], values[lo:hi])
            for lo, hi in zip(starts.tolist(), ends.tolist())}


def latest_tail(conn: Connection, run_id: int, key_id: int, lo: int, hi: int, rows: int = 64):
    """The last few logged steps of a range (latest attempt each), newest last."""
    got = conn.execute(
        select(_m.step, _m.value)
        .where(and_(_m.run_id == run_id, _m.key_id == key_id, _m.step >= lo, _m.step <= hi))
        .order_by(_m.step.desc(), _m.attempt.desc())
        .limit(rows)
    ).all()
    seen: dict[int, float] = {}
    for step, value in got:
        seen.setdefault(step, np.nan if value is None else value)
    steps = np.array(sorted(seen), dtype=np.int64)
    return steps, np.array([seen[k] for k in steps], dtype=float)


def latest_attempt(conn: Connection, run_id: int, key_id: int, step: int) -> int | None:
    """The highest attempt that logged this step of the series; None if none did."""
    return conn.execute(select(func.max(_m.attempt)).where(
        and_(_m.run_id == run_id, _m.key_id == key_id, _m.step == step))).scalar()


def count(conn: Connection, run_id: int) -> int:
    """Rows stored for a run, every attempt counted."""
    return conn.execute(select(func.count()).select_from(tables.metrics).where(_m.run_id == run_id)).scalar_one()
