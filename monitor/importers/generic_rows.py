"""Line-by-line parsing of generic metric logs: every rule of `generic_table`, one object at a time.

This is the exact reading every value goes through when a block of lines is not plain numbers (see
`table_stream` for the fast path, which must give the same rows). It keeps the state that spans
lines: the attempt and last step (`LoggedRows`), names seen, text values left out, wall time.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .input_checks import UnfitNumber, cut, shown, unfit_literal
from .logged_rows import LoggedRows
from .profiles import marked_step_key

STEP_FIELDS = ("step", "_step", "global_step", "iteration", "iter", "trainer/global_step", "Step")
KEY_FIELDS = ("key", "metric", "name")
LONG_VALUE_FIELD = "value"
# A line's wall time: seconds since the epoch, or ISO 8601 text (lingua's `created_at`, fairseq2's
# `Time`).
TIME_FIELDS = ("wall_time", "_timestamp", "timestamp", "time", "created_at", "Time")
NESTED_SEP = "/"
# A step written as progress text, "done/planned" (`_progress_step`).
_PROGRESS = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*")
# Limits that turn a pathological file into one clear line instead of minutes of work or a
# RecursionError: no trainer logs 10,000 metrics, nor names of 32 nested parts.
MAX_COLUMNS = 10_000
MAX_NESTING = 32


def step_field(fields, step_key: str | None) -> str | None:
    """The field that holds the step: `step_key`, else the first of STEP_FIELDS, else that of a
    trainer whose marker the fields carry (`profiles.marked_step_key`: LLaMA-Factory's
    `current_steps`)."""
    if step_key:
        return step_key if step_key in fields else None
    return next((f for f in STEP_FIELDS if f in fields), None) or marked_step_key(fields)


# Fields that count something else than steps in most logs (Keras' CSVLogger counts epochs), but
# may be what a user's log counts steps by: named in the error, never taken unasked.
COUNTER_FIELDS = ("epoch", "batch", "update", "steps")


class RowBuilder:
    """Rows of one file, added an object (a JSON line, a CSV row) at a time; `rows.take()` hands
    over what was added so far while the attempt and last step carry on."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows = LoggedRows()
        self.skipped: dict[str, int] = {}
        self.any_time = False
        self.names: set[str] = set()

    def add_object(self, number: int, obj: dict, step_key: str | None, from_csv=False) -> None:
        field = step_field(obj, step_key)
        if field is None:
            wanted = step_key or " or ".join(STEP_FIELDS[:3])
            counter = next((f for f in obj if str(f).lower() in COUNTER_FIELDS), None) if not step_key else None
            how = (f"; if {counter!r} counts the steps, import with --step-key {counter}" if counter
                   else "; name the field that counts the steps with --step-key")
            raise GapwatchError(f"{self.source}: line {number}: no step field ({wanted}){how}")
        step = self._step(number, field, obj[field])
        wall = self._wall(number, obj)
        key_field = next((k for k in KEY_FIELDS if k in obj), None)
        if key_field is not None and LONG_VALUE_FIELD in obj:
            name = obj[key_field]
            if not isinstance(name, str) or not name:
                raise GapwatchError(f"{self.source}: line {number}: {shown(key_field)} must be a "
                                    "name")
            self._value(number, step, name, obj[LONG_VALUE_FIELD], wall, from_csv)
            return
        try:
            for name, raw in _flatten(obj):
                if name == field or name in TIME_FIELDS:
                    continue
                self._value(number, step, name, raw, wall, from_csv)
        except _TooDeep:
            raise GapwatchError(f"{self.source}: line {number}: nested more than {MAX_NESTING} levels "
                                "deep; a metric name has at most that many parts") from None

    def _step(self, number: int, field: str, raw) -> int:
        try:
            step = _whole(raw)
            if step is None:
                step = _progress_step(raw)
        except UnfitNumber:
            step = MAX_STEP + 1  # beyond even a float: said below as beyond the largest step
        if step is None or step < 0:
            raise GapwatchError(
                f"{self.source}: line {number}: step {shown(raw)} is not a whole number >= 0"
            )
        if step > MAX_STEP:
            raise GapwatchError(f"{self.source}: line {number}: step {shown(raw)} is beyond the "
                                f"largest step a store keeps ({MAX_STEP})")
        return self.rows.at_step(number, step)

    def _wall(self, number: int, obj: dict) -> float:
        for f in TIME_FIELDS:
            if f in obj:
                value = self._checked(number, f, obj[f], from_csv=isinstance(obj[f], str))
                if value is None:
                    value = iso_seconds(obj[f])
                if value is not None and math.isfinite(value):
                    self.any_time = True
                    return value
        return math.nan

    def _value(self, number, step, name, raw, wall, from_csv) -> None:
        if raw is None or (from_csv and str(raw).strip() == ""):
            return
        value = self._checked(number, name, raw, from_csv)
        if value is None:
            if from_csv:
                raise GapwatchError(
                    f"{self.source}: line {number}: column {shown(name)}: {shown(raw)} is not a "
                    "number"
                )
            self.skipped[name] = self.skipped.get(name, 0) + 1
            return
        if name not in self.names:
            if len(self.names) >= MAX_COLUMNS:
                raise GapwatchError(f"{self.source}: line {number}: more than {MAX_COLUMNS:,} metric "
                                    "names; at most that many are read from one file")
            self.names.add(name)
        self.rows.add(step, name, value, wall)

    def _checked(self, number: int, name: str, raw, from_csv: bool) -> float | None:
        try:
            return _number(raw, from_csv)
        except UnfitNumber as exc:
            raise GapwatchError(f"{self.source}: line {number}: {shown(name)}: "
                                f"{exc.describe()}") from None

    def skipped_note(self) -> str | None:
        if not self.skipped:
            return None
        listed = ", ".join(f"{cut(k)} ({n})" for k, n in sorted(self.skipped.items())[:6])
        return f"{self.source}: left out values that are not numbers: {listed}"


class _TooDeep(Exception):
    pass


def _flatten(obj: dict, prefix: str = "", depth: int = 1):
    if depth > MAX_NESTING:
        raise _TooDeep()
    for name, value in obj.items():
        full = f"{prefix}{name}"
        if isinstance(value, dict):
            yield from _flatten(value, full + NESTED_SEP, depth + 1)
        else:
            yield full, value


def iso_seconds(raw) -> float | None:
    """Seconds since the epoch of a time written as ISO 8601 text ("2024-11-01T12:00:00.5+00:00")
    or read as a datetime (a Parquet timestamp); one without an offset is UTC, as
    `datetime.utcnow().isoformat()` writes it. None for anything else."""
    if isinstance(raw, str):
        try:
            raw = datetime.fromisoformat(raw.strip())
        except ValueError:
            return None
    if not isinstance(raw, datetime):
        return None
    return (raw if raw.tzinfo else raw.replace(tzinfo=timezone.utc)).timestamp()


def _progress_step(raw) -> int | None:
    """The steps done of a progress written as text, "done/planned" (ms-swift's
    `global_step/max_steps`: "340/9060"); None for anything else."""
    m = _PROGRESS.fullmatch(raw) if isinstance(raw, str) else None
    return int(m.group(1)) if m and int(m.group(1)) <= int(m.group(2)) else None


def _whole(raw) -> int | None:
    """An exact integer from a JSON value or CSV cell (no detour through float for big ints)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            pass
    # Not as a CSV cell: `true` is a value of 1, never a step.
    value = _number(raw, from_csv=False)
    if value is None or not math.isfinite(value) or value != int(value):
        return None
    return int(value)


def _number(raw, from_csv: bool) -> float | None:
    """A float from a JSON value or CSV cell; None when it is not a number; UnfitNumber when it
    is one no float holds."""
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    if isinstance(raw, (int, float)):
        return float(raw)  # a JSON integer too big for a float was refused by input_checks.loads
    if isinstance(raw, str):
        text = raw.strip()
        if from_csv and text.lower() in ("true", "false"):
            return 1.0 if text.lower() == "true" else 0.0
        try:
            value = float(text)
        except ValueError:
            return None
        if math.isinf(value) and unfit_literal(text):
            raise UnfitNumber(text)
        return value
    return None
