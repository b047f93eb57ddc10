"""What arrived in the store since the watch service last looked, as a RunData of new rows.

The cursor is kept per metric key, not per run: evals are logged late (the eval of step 1,000
lands after training reached 1,010), and a per-run step cursor would skip them. Rows a restarted
trainer logs again (attempt 2 replaying steps attempt 1 already logged) are new too: the cursor
remembers the latest attempt and how far it has logged, and while that attempt is behind a key's
cursor (replaying) the key is read from there. Every read is a range of one series (run, key) in
step order, and a run with nothing new costs no read beyond its high-water marks (which the service
reads for all its runs at once).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from monitor.alerting.incidents import Progress, spacing_of
from monitor.schema import RunData, RunInfo, empty_events, empty_long
from monitor.store import KeyRange, KeyRows, run_data
from monitor.store import RunMarks

# Series written by detectors (monitor.schema: detect/spike_score/...), not by the run.
DETECTOR_SERIES_PREFIX = "detect/"

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
class Batch:
    rows: RunData
    attempts: pd.DataFrame
    """key, step, attempt: the latest attempt of every new (key, step), to tell incidents apart."""
    window_end: int
    more: bool
    """True when rows beyond `window_end` wait for the next poll (catching up on a long run)."""


def marks(store, run: str) -> RunMarks:
    """The run's high-water marks, without the series detectors write (`ours`)."""
    return ours(store.run_marks(run))


def ours(m: RunMarks) -> RunMarks:
    """Marks without the series detectors write (spike scores, in a store older than their own
    table): the watch service's own output is not news to judge."""
    kept = {k: v for k, v in m.series.items() if not k.startswith(DETECTOR_SERIES_PREFIX)}
    return dataclasses.replace(m, series=kept) if len(kept) != len(m.series) else m


def has_news(cursor: Cursor, m: RunMarks) -> bool:
    return (
        m.last_event_id > cursor.event_id
        or m.attempts > cursor.attempt
        or any(last > cursor.key_last.get(key, -1) or n != cursor.key_rows.get(key)
               for key, (_, last, n) in m.series.items())
    )


def progress(run: str, cursor: Cursor, m: RunMarks) -> dict[tuple[str, str | None], Progress]:
    """How far each metric has been read, with its typical logging interval, for the incident logic."""
    out: dict[tuple[str, str | None], Progress] = {}
    for key, last in cursor.key_last.items():
        first, _, n = m.series.get(key, (last, last, 1))
        out[(run, key)] = Progress(last, spacing_of(first, last, n))
    if cursor.key_last:
        out[(run, None)] = Progress(max(cursor.key_last.values()))
    return out


def read_batch(store, run: str, info: RunInfo, cursor: Cursor, m: RunMarks, window_steps: int) -> Batch:
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
    requests = [KeyRange(key, after, hi, cursor.key_last.get(key, -1), replay_from_attempt)
                for key, (after, replay_from_attempt) in ranges.items()]
    with store.atomic():
        new = store.read_key_rows(run, requests)
        frame = _frame(new)
        # The cursor of each row's key, a key at a time (the frame holds the keys in sorted order).
        seen = np.repeat(np.array([cursor.key_last.get(k, -1) for k in sorted(new)], dtype="int64"),
                         [len(new[k]) for k in sorted(new)])
        replay = frame[frame["step"].to_numpy() <= seen]
        earlier = _earlier_attempts(store, run, replay)
        events = _events(store, run, cursor, m, hi if more else None)
    rows = run_data(info, new, events, earlier)
    _advance(cursor, frame, m, hi)
    latest = frame.drop_duplicates(["key", "step"], keep="last")[["key", "step", "attempt"]]
    return Batch(rows=rows, attempts=latest.reset_index(drop=True), window_end=hi, more=more)


def _key_ranges(cursor: Cursor, m: RunMarks) -> dict[str, tuple[int, int | None]]:
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


def _frame(rows: dict[str, KeyRows]) -> pd.DataFrame:
    """The rows read, long (key, step, attempt, value), ordered by key, step and attempt."""
    if not rows:
        return empty_long("key", "step", "attempt", "value")
    keys = sorted(rows)
    frame = pd.DataFrame({
        "key": np.concatenate([np.full(len(rows[k]), k, dtype=object) for k in keys]),
        "step": np.concatenate([rows[k].steps for k in keys]).astype("int64"),
        "attempt": np.concatenate([rows[k].attempts for k in keys]).astype("int64"),
        "value": np.concatenate([rows[k].values for k in keys]).astype(float),
    })
    frame["key"] = frame["key"].astype(str)
    return frame


def _earlier_attempts(store, run: str, replay: pd.DataFrame) -> dict[str, KeyRows]:
    """Rows of every attempt at replayed (key, step)s: the resume detector compares them."""
    if replay.empty:
        return {}
    found = store.read_attempt_rows(run, list(replay["key"].unique()), int(replay["step"].min()),
                                    int(replay["step"].max()))
    out = {}
    for key, steps in replay.groupby("key")["step"]:
        rows = found.get(key)
        if rows is None:
            continue
        keep = np.isin(rows.steps, steps.to_numpy())
        out[key] = KeyRows(rows.steps[keep], rows.attempts[keep], rows.values[keep])
    return out


def _events(store, run: str, cursor: Cursor, m: RunMarks, hi: int | None) -> pd.DataFrame:
    """New events up to step `hi` (all when None); later ones wait in the cursor for their rows, so
    a detector never sees an event far ahead of the rows it judges. Read only when the marks show
    new ones (events are rare; most polls have none)."""
    waiting = list(cursor.pending_events)
    if m.last_event_id > cursor.event_id:
        raw = store.read_events_after(run, cursor.event_id)
        if len(raw):
            cursor.event_id = int(raw["id"].max())
        waiting += [
            {"step": int(step), "kind": kind, "attempt": int(attempt), "payload": payload}
            for step, kind, attempt, payload in zip(raw["step"], raw["kind"], raw["attempt"], raw["payload"])
        ]
    due = [ev for ev in waiting if hi is None or ev["step"] <= hi]
    cursor.pending_events = [ev for ev in waiting if not (hi is None or ev["step"] <= hi)]
    if not due:
        return empty_events()
    out = pd.DataFrame(due, columns=["step", "kind", "attempt", "payload"])
    out["step"] = out["step"].astype("int64")
    out["attempt"] = out["attempt"].astype("int64")
    return out.sort_values("step", kind="stable").reset_index(drop=True)


def _advance(cursor: Cursor, frame: pd.DataFrame, m: RunMarks, hi: int) -> None:
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
