"""What arrived in the store since the watch service last looked, as a RunData of new rows.

The cursor is kept per metric key, not per run: evals are logged late (the eval of step 1,000
lands after training reached 1,010), and a per-run step cursor would skip them. Rows a restarted
trainer logs again (attempt 2 replaying steps attempt 1 already logged) are new too: the cursor
remembers the latest attempt and how far it has logged, and while that attempt is behind a key's
cursor (replaying) the key is read from there. Every read is a range of the metrics primary key
(run, key, step), and a poll with nothing new costs one query on the `series` marks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import and_, func, or_, select

from monitor.alerting.incidents import Progress
from monitor.schema import RunData, RunInfo, empty_events
from monitor.store import tables

# How far back of a key's cursor a new attempt is looked for. A trainer resumes from its latest
# checkpoint; checkpoints are a few thousand steps apart at most in the runs we know (OLMo: 1,000),
# so replays start well inside this window.
REPLAY_LOOKBACK_STEPS = 10_000


@dataclass
class Cursor:
    key_last: dict[str, int] = field(default_factory=dict)
    """Last step read per metric key."""
    key_rows: dict[str, int] = field(default_factory=dict)
    """Rows the store held per key when last read (a replay adds rows without moving last)."""
    attempt: int = 0
    """Latest attempt of the run known."""
    attempt_last: int = -1
    """Last step read from that attempt (behind a key's cursor while it replays)."""
    event_id: int = 0
    """Highest events-table id read."""
    pending_events: list[dict[str, Any]] = field(default_factory=list)
    """Events read but ahead of the rows (while catching up): handed over with their steps."""

    def to_dict(self) -> dict[str, Any]:
        return {"key_last": self.key_last, "key_rows": self.key_rows, "attempt": self.attempt,
                "attempt_last": self.attempt_last, "event_id": self.event_id,
                "pending_events": self.pending_events}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Cursor":
        return cls({k: int(v) for k, v in d.get("key_last", {}).items()},
                   {k: int(v) for k, v in d.get("key_rows", {}).items()},
                   int(d.get("attempt", 0)), int(d.get("attempt_last", -1)), int(d.get("event_id", 0)),
                   list(d.get("pending_events", [])))


@dataclass
class Marks:
    """The store's high-water marks of one run."""

    series: dict[str, tuple[int, int, int]]
    """Per key: first step, last step, rows."""
    last_event_id: int
    attempts: int
    """Attempts the run has started (the logging client counts them)."""

    @property
    def last_step(self) -> int | None:
        return max((m[1] for m in self.series.values()), default=None)


@dataclass
class Batch:
    rows: RunData
    attempts: pd.DataFrame
    """key, step, attempt: the latest attempt of every new (key, step), to tell incidents apart."""
    window_end: int
    more: bool
    """True when rows beyond `window_end` wait for the next poll (catching up on a long run)."""


def marks(store, run: str) -> Marks:
    s, e, r = tables.series.c, tables.events.c, tables.runs.c
    with store.atomic() as conn:
        run_id = store.run_id(run)
        rows = conn.execute(select(s.key_id, s.first_step, s.last_step, s.n).where(s.run_id == run_id)).all()
        names = store.key_names(conn, [row[0] for row in rows])
        last_event = conn.execute(select(func.max(e.id)).where(e.run_id == run_id)).scalar() or 0
        attempts = conn.execute(select(r.attempts).where(r.id == run_id)).scalar() or 0
    return Marks({names[k]: (int(a), int(b), int(n)) for k, a, b, n in rows}, int(last_event), int(attempts))


def has_news(cursor: Cursor, m: Marks) -> bool:
    return (
        m.last_event_id > cursor.event_id
        or m.attempts > cursor.attempt
        or any(last > cursor.key_last.get(key, -1) or n != cursor.key_rows.get(key)
               for key, (_, last, n) in m.series.items())
    )


def progress(run: str, cursor: Cursor, m: Marks) -> dict[tuple[str, str | None], Progress]:
    """How far each metric has been read, with its typical logging interval, for the incident logic."""
    out: dict[tuple[str, str | None], Progress] = {}
    for key, last in cursor.key_last.items():
        first, _, n = m.series.get(key, (last, last, 1))
        spacing = (last - first) / (n - 1) if n > 1 and last > first else 1.0
        out[(run, key)] = Progress(last, max(1.0, spacing))
    if cursor.key_last:
        out[(run, None)] = Progress(max(cursor.key_last.values()))
    return out


def read_batch(store, run: str, info: RunInfo, cursor: Cursor, m: Marks, window_steps: int) -> Batch:
    """Rows past the cursor, at most `window_steps` steps of them; moves the cursor past them."""
    if m.attempts > cursor.attempt and cursor.key_last:
        # A new attempt began: it replays from its checkpoint, somewhere behind the cursors.
        cursor.attempt = m.attempts
        cursor.attempt_last = min(cursor.key_last.values()) - REPLAY_LOOKBACK_STEPS
    ranges = _key_ranges(cursor, m)
    lo = min((start for start, _ in ranges.values()), default=0) + 1
    hi = lo + window_steps - 1
    last = m.last_step if m.last_step is not None else hi
    more = last > hi
    hi = min(hi, last)
    mt = tables.metrics.c
    parts = []
    with store.atomic() as conn:
        run_id = store.run_id(run)
        ids = store.key_ids(conn, list(ranges))
        for key, (after, replay_from_attempt) in ranges.items():
            cond = and_(mt.run_id == run_id, mt.key_id == ids[key], mt.step > after, mt.step <= hi)
            if replay_from_attempt is not None:
                cond = and_(cond, or_(mt.step > cursor.key_last.get(key, -1), mt.attempt >= replay_from_attempt))
            parts.extend(conn.execute(select(mt.key_id, mt.step, mt.attempt, mt.value).where(cond)
                                      .order_by(mt.step, mt.attempt)).all())
        frame = _frame(parts, store.key_names(conn, {p[0] for p in parts}))
        seen = np.array([cursor.key_last.get(k, -1) for k in frame["key"]], dtype="int64")
        replay = frame[frame["step"].to_numpy() <= seen]
        earlier = _earlier_attempts(conn, store, run_id, replay)
        events = _events(conn, run_id, cursor, hi if more else None)
    rows = _run_data(info, frame, earlier, events)
    _advance(cursor, frame, m, hi)
    latest = frame.drop_duplicates(["key", "step"], keep="last")[["key", "step", "attempt"]]
    return Batch(rows=rows, attempts=latest.reset_index(drop=True), window_end=hi, more=more)


def _key_ranges(cursor: Cursor, m: Marks) -> dict[str, tuple[int, int | None]]:
    """Per key with news: read steps after this one, and (while replaying) rows of attempts from."""
    ranges: dict[str, tuple[int, int | None]] = {}
    for key, (first, last, n) in m.series.items():
        seen = cursor.key_last.get(key)
        if seen is None:
            ranges[key] = (first - 1, None)
        elif cursor.attempt_last < seen:
            ranges[key] = (max(cursor.attempt_last, seen - REPLAY_LOOKBACK_STEPS), cursor.attempt)
        elif last > seen or n != cursor.key_rows.get(key):
            ranges[key] = (seen, None)
    return ranges


def _frame(raw, names: dict[int, str]) -> pd.DataFrame:
    if not raw:
        return pd.DataFrame({"key": pd.Series(dtype=str), "step": pd.Series(dtype="int64"),
                             "attempt": pd.Series(dtype="int64"), "value": pd.Series(dtype=float)})
    frame = pd.DataFrame(raw, columns=["key_id", "step", "attempt", "value"])
    frame["value"] = frame["value"].astype(float)
    frame["step"] = frame["step"].astype("int64")
    frame["attempt"] = frame["attempt"].astype("int64")
    frame["key"] = frame["key_id"].map(names)
    return frame[["key", "step", "attempt", "value"]].sort_values(["key", "step", "attempt"], kind="stable")


def _earlier_attempts(conn, store, run_id: int, replay: pd.DataFrame) -> pd.DataFrame:
    """Rows of earlier attempts at replayed (key, step)s: the resume detector compares them."""
    if replay.empty:
        return replay
    mt = tables.metrics.c
    ids = store.key_ids(conn, replay["key"].unique())
    raw = conn.execute(select(mt.key_id, mt.step, mt.attempt, mt.value).where(and_(
        mt.run_id == run_id, mt.key_id.in_(list(ids.values())),
        mt.step >= int(replay["step"].min()), mt.step <= int(replay["step"].max()),
    ))).all()
    frame = _frame(raw, store.key_names(conn, {r[0] for r in raw}))
    return frame.merge(replay[["key", "step"]].drop_duplicates(), on=["key", "step"])


def _events(conn, run_id: int, cursor: Cursor, hi: int | None) -> pd.DataFrame:
    """New events up to step `hi` (all when None); later ones wait in the cursor for their rows, so
    a detector never sees an event far ahead of the rows it judges."""
    e = tables.events.c
    raw = conn.execute(select(e.id, e.step, e.kind, e.attempt, e.payload)
                       .where(and_(e.run_id == run_id, e.id > cursor.event_id)).order_by(e.id)).all()
    if raw:
        cursor.event_id = max(r[0] for r in raw)
    waiting = cursor.pending_events + [
        {"step": int(step), "kind": kind, "attempt": int(attempt), "payload": json.loads(payload)}
        for _, step, kind, attempt, payload in raw
    ]
    due = [ev for ev in waiting if hi is None or ev["step"] <= hi]
    cursor.pending_events = [ev for ev in waiting if not (hi is None or ev["step"] <= hi)]
    if not due:
        return empty_events()
    out = pd.DataFrame(due, columns=["step", "kind", "attempt", "payload"])
    out["step"] = out["step"].astype("int64")
    out["attempt"] = out["attempt"].astype("int64")
    return out.sort_values("step", kind="stable").reset_index(drop=True)


def _run_data(info: RunInfo, frame: pd.DataFrame, earlier: pd.DataFrame, events: pd.DataFrame) -> RunData:
    latest = frame.drop_duplicates(["key", "step"], keep="last")
    if len(latest):
        scalars = latest.pivot(index="step", columns="key", values="value").sort_index()
        scalars.columns.name = None
    else:
        scalars = pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    scalars.index = scalars.index.astype("int64")
    scalars.index.name = "step"
    both = pd.concat([earlier, frame], ignore_index=True).drop_duplicates(["key", "step", "attempt"])
    repeated = both.duplicated(["key", "step"], keep=False)
    repeats = both.loc[repeated, ["key", "step", "attempt", "value"]].sort_values(["key", "step", "attempt"])
    nonfinite = latest.loc[~np.isfinite(latest["value"].to_numpy()), ["key", "step", "value"]]
    return RunData(info=info, scalars=scalars, events=events,
                   repeats=repeats.reset_index(drop=True), logged_nonfinite=nonfinite.reset_index(drop=True))


def _advance(cursor: Cursor, frame: pd.DataFrame, m: Marks, hi: int) -> None:
    for key, (_, last, n) in m.series.items():
        reached = min(last, hi)
        if reached > cursor.key_last.get(key, -1):
            cursor.key_last[key] = reached
        if last <= hi:
            # Every row of the key has been read (rows counted by the marks read before the rows).
            cursor.key_rows[key] = n
    for key, top in frame.groupby("key")["step"].max().items():
        # Rows written after the marks were read were read too; do not read them again.
        cursor.key_last[key] = max(cursor.key_last.get(key, -1), int(top))
    if len(frame):
        top = int(frame["attempt"].max())
        top_last = int(frame.loc[frame["attempt"] == top, "step"].max())
        if top > cursor.attempt:
            cursor.attempt, cursor.attempt_last = top, top_last
        elif top == cursor.attempt:
            cursor.attempt_last = max(cursor.attempt_last, top_last)
