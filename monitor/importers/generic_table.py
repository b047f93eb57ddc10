"""Generic metric logs: JSON Lines and CSV files that any trainer can write.

Two shapes, told apart by their fields:
* long: one value per line, `{"step": 10, "key": "train/loss", "value": 2.5}` (also `metric` or
  `name` for the key), or CSV columns step,key,value;
* wide: one step per line, `{"step": 10, "train/loss": 2.5, "optim": {"lr": 1e-4}}` (nested objects
  become `optim/lr`), or a CSV with a step column and one column per metric.

The step field is the profile's `step_key` when it has one, else the first of `step`, `_step`,
`global_step`, `iteration`, `iter`, `trainer/global_step` that the file has.

Rules (the same as for text logs, since these are appended by a running trainer):
* null or empty is "not logged"; NaN and Infinity (JSON's non-standard spellings and CSV's) are
  logged values; booleans become 1/0; text values are left out and counted.
* A line that is not valid JSON, or lacks the step, or has a step that is not a whole number, is an
  error naming the line. A last line without its newline is still being written and is left out.
* A step lower than the previous line's step is a restart: a new attempt, whose values win, and a
  `restart` event.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pandas as pd

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .imported_run import ImportedRun
from .logged_rows import LoggedRows
from .wandb.csv_export import separator

STEP_FIELDS = ("step", "_step", "global_step", "iteration", "iter", "trainer/global_step")
KEY_FIELDS = ("key", "metric", "name")
LONG_VALUE_FIELD = "value"
TIME_FIELDS = ("wall_time", "_timestamp", "timestamp", "time")
NESTED_SEP = "/"
# Limits that turn a pathological file into one clear line instead of minutes of work or a
# RecursionError: no trainer logs 10,000 metrics, nor names of 32 nested parts.
MAX_COLUMNS = 10_000
MAX_NESTING = 32


def parse_jsonl(path: str | Path, step_key: str | None = None) -> ImportedRun:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GapwatchError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise GapwatchError(f"{path}: not a UTF-8 text file") from None
    lines = text.split("\n")
    partial = lines.pop()
    builder = _Builder(str(path))
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GapwatchError(f"{path}: line {number}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise GapwatchError(f"{path}: line {number}: nested far deeper than {MAX_NESTING} "
                                "levels: not a metric log") from None
        if not isinstance(obj, dict):
            raise GapwatchError(f"{path}: line {number}: expected a JSON object")
        builder.add_object(number, obj, step_key)
    run = builder.result(path.stem)
    if partial.strip():
        run.notes.append(f"{path}: line {len(lines) + 1} has no newline yet (still being "
                         "written): left out")
    return run


def parse_generic_csv(path: str | Path, step_key: str | None = None) -> ImportedRun:
    path = Path(path)
    _check_width(path)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[],
                            skipinitialspace=True, sep=separator(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise GapwatchError(f"{path}: cannot read: {exc}") from None
    except pd.errors.EmptyDataError:
        raise GapwatchError(f"{path}: empty file") from None
    except pd.errors.ParserError as exc:
        raise GapwatchError(f"{path}: not a valid CSV file: {' '.join(str(exc).split())}") from None
    builder = _Builder(str(path))
    columns = list(table.columns)
    for number, row in enumerate(table.itertuples(index=False, name=None), start=2):
        builder.add_object(number, dict(zip(columns, row)), step_key, from_csv=True)
    return builder.result(path.stem)


def _check_width(path: Path) -> None:
    """Refuse a CSV wider than MAX_COLUMNS from its header alone: parsing millions of columns
    takes minutes before anything could be said."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh, delimiter=separator(path)), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return  # pandas says what is wrong with it
    if len(header) > MAX_COLUMNS + 1:
        raise GapwatchError(f"{path}: {len(header):,} columns; at most {MAX_COLUMNS:,} metrics are "
                            "read from one file")


def step_field(fields, step_key: str | None) -> str | None:
    if step_key:
        return step_key if step_key in fields else None
    return next((f for f in STEP_FIELDS if f in fields), None)


class _Builder:
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
            raise GapwatchError(f"{self.source}: line {number}: no step field ({wanted})")
        step = self._step(number, field, obj[field])
        wall = self._wall(obj)
        key_field = next((k for k in KEY_FIELDS if k in obj), None)
        if key_field is not None and LONG_VALUE_FIELD in obj:
            name = obj[key_field]
            if not isinstance(name, str) or not name:
                raise GapwatchError(f"{self.source}: line {number}: {key_field} must be a name")
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
        step = _whole(raw)
        if step is None or step < 0:
            raise GapwatchError(
                f"{self.source}: line {number}: step {raw!r} is not a whole number >= 0"
            )
        if step > MAX_STEP:
            raise GapwatchError(f"{self.source}: line {number}: step {raw!r} is beyond the largest "
                                f"step a store keeps ({MAX_STEP})")
        return self.rows.at_step(number, step)

    def _wall(self, obj: dict) -> float:
        for f in TIME_FIELDS:
            if f in obj:
                value = _number(obj[f], from_csv=isinstance(obj[f], str))
                if value is not None and math.isfinite(value):
                    self.any_time = True
                    return value
        return math.nan

    def _value(self, number, step, name, raw, wall, from_csv) -> None:
        if raw is None or (from_csv and str(raw).strip() == ""):
            return
        value = _number(raw, from_csv=from_csv)
        if value is None:
            if from_csv:
                raise GapwatchError(
                    f"{self.source}: line {number}: column {name!r}: {raw!r} is not a number"
                )
            self.skipped[name] = self.skipped.get(name, 0) + 1
            return
        if name not in self.names:
            if len(self.names) >= MAX_COLUMNS:
                raise GapwatchError(f"{self.source}: line {number}: more than {MAX_COLUMNS:,} metric "
                                    "names; at most that many are read from one file")
            self.names.add(name)
        self.rows.add(step, name, value, wall)

    def result(self, name_hint: str) -> ImportedRun:
        if not len(self.rows):
            raise GapwatchError(f"{self.source}: no metric values found")
        notes = []
        if self.skipped:
            listed = ", ".join(f"{k} ({n})" for k, n in sorted(self.skipped.items())[:6])
            notes.append(f"{self.source}: left out values that are not numbers: {listed}")
        scalars = self.rows.scalars(with_wall_time=self.any_time)
        repeated = scalars.duplicated(["key", "step", "attempt"], keep="last")
        if repeated.any():
            first = scalars.loc[repeated].iloc[0]
            notes.append(f"{self.source}: {int(repeated.sum()):,} values repeat a metric at a step an "
                         f"earlier line gave (first: {first['key']} at step {first['step']}); the "
                         "last value wins")
        return ImportedRun(
            name_hint=name_hint,
            scalars=scalars,
            events=self.rows.events,
            source=self.source,
            notes=notes,
        )


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
    value = _number(raw, from_csv=isinstance(raw, str))
    if value is None or not math.isfinite(value) or value != int(value):
        return None
    return int(value)


def _number(raw, from_csv: bool) -> float | None:
    """A float from a JSON value or CSV cell; None when it is not a number."""
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    if isinstance(raw, (int, float)):
        return float(raw)
    if isinstance(raw, str):
        text = raw.strip()
        if from_csv and text.lower() in ("true", "false"):
            return 1.0 if text.lower() == "true" else 0.0
        try:
            return float(text)
        except ValueError:
            return None
    return None
