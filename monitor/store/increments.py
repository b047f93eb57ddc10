"""The watch service's incremental reads: a run's high-water marks, the rows of some keys past a
cursor (replays included), the earlier attempts at replayed steps, and events past an id.

What to read is the watch service's decision (monitor/watch/rows.py keeps the cursor); this module
only reads it, inside this thread's transaction when one is open, so one poll sees one snapshot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd
from sqlalchemy import and_, func, select

from monitor.schema import SeriesMark
from monitor.store import metric_rows, tables
from monitor.store.database import Database
from monitor.store.run_frames import KeyRows


@dataclass
class RunMarks:
    """The store's high-water marks of one run."""

    series: dict[str, SeriesMark]
    last_event_id: int
    attempts: int
    """Attempts the run has started (the logging client counts them)."""

    @property
    def last_step(self) -> int | None:
        return max((m[1] for m in self.series.values()), default=None)


@dataclass
class KeyRange:
    """Rows of one key to read: steps in (after, upto]; while an attempt replays, at steps up to
    `seen` only rows of attempt `replay_attempt` or later."""

    key: str
    after: int
    upto: int
    seen: int | None = None
    replay_attempt: int | None = None


def marks(db: Database, run: str) -> RunMarks:
    with db.read() as conn:
        db.run_id(conn, run)  # an unknown run is the user's error, in one line
    return marks_of(db, [run])[run]


def marks_of(db: Database, runs: list[str]) -> dict[str, RunMarks]:
    """The marks of several runs in three queries, whatever their number (the watch service reads
    them once a poll for every run it holds); runs the store does not know are left out."""
    s, e, r = tables.series.c, tables.events.c, tables.runs.c
    if not runs:
        return {}
    with db.read() as conn:
        found = conn.execute(select(r.id, r.name, r.attempts).where(r.name.in_(list(runs)))).all()
        names = {run_id: name for run_id, name, _ in found}
        for run_id, name in names.items():
            db.remember_run(name, run_id)
        series = conn.execute(select(s.run_id, s.key_id, s.first_step, s.last_step, s.n)
                              .where(s.run_id.in_(list(names)))).all()
        last_events = dict(conn.execute(select(e.run_id, func.max(e.id)).where(e.run_id.in_(list(names)))
                                        .group_by(e.run_id)).all())
        key_names = db.key_names(conn, {row[1] for row in series})
    per_run: dict[int, dict[str, tuple[int, int, int]]] = {run_id: {} for run_id in names}
    for run_id, key_id, first, last, n in series:
        per_run[run_id][key_names[key_id]] = SeriesMark(int(first), int(last), int(n))
    return {name: RunMarks(per_run[run_id], int(last_events.get(run_id) or 0), int(attempts or 0))
            for run_id, name, attempts in found}


def key_rows(db: Database, run: str, ranges: list[KeyRange]) -> dict[str, KeyRows]:
    """The rows of each range, per key (keys the store does not know give none)."""
    out: dict[str, KeyRows] = {}
    with db.read() as conn:
        run_id = db.run_id(conn, run)
        ids = db.key_ids(conn, [r.key for r in ranges])
        # Series read from the same step (a run's dense metrics, at one cursor) share two queries.
        groups: dict[tuple, list[str]] = {}
        for r in ranges:
            if r.key in ids:
                replay = (r.seen, r.replay_attempt) if r.replay_attempt is not None else None
                groups.setdefault((r.after + 1, r.upto, replay), []).append(r.key)
        for (lo, hi, replay), keys in groups.items():
            found = metric_rows.many_series_rows(conn, run_id, [ids[k] for k in keys], lo, hi, replay)
            out.update((k, found[ids[k]]) for k in keys if len(found[ids[k]]))
    return out


def attempt_rows(db: Database, run: str, keys: list[str], lo: int, hi: int) -> dict[str, KeyRows]:
    """Every attempt's rows of these keys with lo <= step <= hi."""
    out: dict[str, KeyRows] = {}
    with db.read() as conn:
        run_id = db.run_id(conn, run)
        for key, key_id in db.key_ids(conn, keys).items():
            rows = metric_rows.series_rows(conn, run_id, key_id, lo, hi)
            if len(rows):
                out[key] = rows
    return out


def events_after(db: Database, run: str, event_id: int) -> pd.DataFrame:
    """Events with an id above `event_id`, in id order: id, step, kind, attempt, payload (dict)."""
    e = tables.events.c
    with db.read() as conn:
        run_id = db.run_id(conn, run)
        raw = conn.execute(select(e.id, e.step, e.kind, e.attempt, e.payload)
                           .where(and_(e.run_id == run_id, e.id > event_id)).order_by(e.id)).all()
    frame = pd.DataFrame(raw, columns=["id", "step", "kind", "attempt", "payload"])
    frame["payload"] = frame["payload"].map(json.loads)
    return frame


def latest_attempts(db: Database, run: str, points: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The highest attempt that logged each (key, step); pairs nobody logged are left out."""
    out: dict[tuple[str, int], int] = {}
    with db.read() as conn:
        run_id = db.run_id(conn, run)
        ids = db.key_ids(conn, [key for key, _ in points])
        for key, step in points:
            if key in ids:
                attempt = metric_rows.latest_attempt(conn, run_id, ids[key], int(step))
                if attempt is not None:
                    out[(key, int(step))] = int(attempt)
    return out
