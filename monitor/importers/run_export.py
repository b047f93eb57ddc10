"""A stored run's history out of gapwatch, and back in: `gapwatch export` and `history()`.

The export is long, one row per stored (key, step, attempt): columns `step`, `attempt`, `key`,
`value`, as CSV, JSON Lines or Parquet (chosen by the file's extension). It is written a key at a
time, so memory holds one series, not the run. JSON Lines also carries the run's events, one line
each (`step`, `attempt`, `event`: its kind, `payload`). Every attempt is kept, so importing an
export (format `gapwatch-export`, recognised by its columns) gives back the same run: the same
rows, the same attempts, the same latest values.

`history(run, keys)` is W&B's `run.history()` for a stored run: a DataFrame indexed by step, one
column per key, the latest attempt's value at each step.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .formats import Format
from .imported_run import ImportedRun, scalars_frame

COLUMNS = ("step", "attempt", "key", "value")
SCHEMA = pa.schema([("step", pa.int64()), ("attempt", pa.int64()), ("key", pa.string()),
                    ("value", pa.float64())])
SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
EVENT_FIELD = "event"


def export_kind(path: str | os.PathLike) -> str:
    kind = SUFFIXES.get(Path(path).suffix.lower())
    if kind is None:
        raise GapwatchError(f"{path}: write .csv, .jsonl or .parquet (the extension picks the "
                            "format)")
    return kind


def chosen_keys(store, name: str, patterns: list[str] | None) -> list[str]:
    """The run's keys matching any of the glob patterns (all of them when None)."""
    if store.get_run(name) is None:
        raise GapwatchError(f"no run {name!r} in {store.url.redacted()}")
    keys = sorted(store.list_keys(name))
    if not patterns:
        return keys
    picked = [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns)]
    if not picked:
        raise GapwatchError(f"run {name!r}: no key matches {', '.join(patterns)} (it has "
                            f"{', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''})")
    return picked


def export_run(store, name: str, path: str | os.PathLike,
               keys: list[str] | None = None) -> int:
    """Write run `name`'s rows (keys: glob patterns) to `path`; the number of rows written."""
    kind = export_kind(path)
    picked = chosen_keys(store, name, keys)
    path = Path(path)
    written = 0
    tmp = path.with_name(path.name + ".partial")
    with _Writer(kind, tmp) as out:
        for key in picked:
            rows = store.read_attempt_rows(name, [key], 0, MAX_STEP).get(key)
            if rows is None or not len(rows):
                continue
            out.write(pa.table({
                "step": pa.array(rows.steps, pa.int64()),
                "attempt": pa.array(rows.attempts, pa.int64()),
                "key": pa.array(np.full(len(rows), key, dtype=object), pa.string()),
                "value": pa.array(rows.values, pa.float64()),
            }, schema=SCHEMA))
            written += len(rows)
        if kind == "jsonl":
            out.events(store.read_events(name))
    tmp.replace(path)  # a reader never sees half a file
    return written


class _Writer:
    def __init__(self, kind: str, path: Path) -> None:
        self.kind, self.path = kind, path

    def __enter__(self):
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            self._out = pq.ParquetWriter(self.path, SCHEMA)
        elif self.kind == "csv":
            import pyarrow.csv as pa_csv

            self._out = pa_csv.CSVWriter(self.path, SCHEMA)
        else:
            self._out = open(self.path, "w", encoding="utf-8")
        return self

    def write(self, table: pa.Table) -> None:
        if self.kind in ("parquet", "csv"):
            self._out.write_table(table)
            return
        cols = [table.column(c).to_pylist() for c in COLUMNS]
        # json writes NaN and Infinity as JavaScript spells them, which gapwatch's readers accept.
        self._out.write("".join(json.dumps(dict(zip(COLUMNS, row))) + "\n" for row in zip(*cols)))

    def events(self, events: pd.DataFrame) -> None:
        for row in events.itertuples(index=False):
            self._out.write(json.dumps({"step": int(row.step), "attempt": int(row.attempt),
                                        EVENT_FIELD: str(row.kind),
                                        "payload": dict(row.payload or {})}, default=str) + "\n")

    def __exit__(self, *exc) -> None:
        self._out.close()
        if exc[0] is not None:
            self.path.unlink(missing_ok=True)


# --- reading an export back -----------------------------------------------------------------------
def is_export(path: str | os.PathLike, head: str = "") -> bool:
    """Whether a file is a gapwatch export (by its columns; head: its first bytes as text)."""
    kind = SUFFIXES.get(Path(path).suffix.lower())
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except (OSError, pa.ArrowException):
            return False
        return set(COLUMNS) <= set(names)
    first = head.split("\n", 1)[0].strip()
    if kind == "csv":
        return [c.strip('"') for c in first.split(",")] == list(COLUMNS)
    if kind == "jsonl":
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # not an export; its own importer says what it is
            return False
        return isinstance(obj, dict) and set(obj) == set(COLUMNS)
    return False


def parse_export(path: str | os.PathLike) -> ImportedRun:
    path = Path(path)
    kind = export_kind(path)
    events: list[dict] = []
    if kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=list(COLUMNS))
    elif kind == "csv":
        import pyarrow.csv as pa_csv

        # Only an empty cell is missing: `nan` is a logged NaN.
        convert = pa_csv.ConvertOptions(column_types=SCHEMA, null_values=[""],
                                        strings_can_be_null=False)
        try:
            table = pa_csv.read_csv(path, convert_options=convert)
        except pa.ArrowInvalid as exc:
            raise GapwatchError(f"{path}: not a gapwatch export: {' '.join(str(exc).split())}") \
                from None
    else:
        table, events = _read_jsonl(path)
    if table.column("step").null_count or table.column("attempt").null_count:
        raise GapwatchError(f"{path}: a row without its step or attempt")
    steps = table.column("step").to_numpy()
    keys = pd.Categorical(table.column("key").to_pandas())
    values = table.column("value").to_numpy(zero_copy_only=False)
    attempts = table.column("attempt").to_numpy()
    # Logging order, which the attempt rules of `imported_run` read: attempt, then step.
    order = np.lexsort((steps, attempts))
    scalars = scalars_frame(steps[order], keys[order], values[order], attempts[order])
    return ImportedRun(name_hint=path.stem, scalars=scalars, events=events, source=str(path))


def _read_jsonl(path: Path) -> tuple[pa.Table, list[dict]]:
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    events = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if EVENT_FIELD in obj:
                    events.append({"step": int(obj["step"]), "attempt": int(obj["attempt"]),
                                   "kind": str(obj[EVENT_FIELD]),
                                   "payload": dict(obj.get("payload") or {})})
                    continue
                row = (int(obj["step"]), int(obj["attempt"]), str(obj["key"]),
                       math.nan if obj["value"] is None else float(obj["value"]))
            except (ValueError, KeyError, TypeError, RecursionError):
                raise GapwatchError(f"{path}: line {number}: not a row of a gapwatch export "
                                    "(step, attempt, key, value)") from None
            for c, v in zip(COLUMNS, row):
                cols[c].append(v)
    return pa.table(cols, schema=SCHEMA), events


# --- history() -------------------------------------------------------------------------------------
def history(run: str, keys: str | list[str] | None = None, *, store=None) -> pd.DataFrame:
    """Run `run`'s stored history: one column per key (glob patterns allowed), indexed by step,
    the latest attempt's value at each step. store: a Store or a store URL (default: gapwatch's
    default store, as the CLI opens it)."""
    from monitor.store import open_store

    owned = store is None or isinstance(store, str)
    db = open_store(store) if owned else store
    try:
        patterns = [keys] if isinstance(keys, str) else keys
        picked = chosen_keys(db, run, patterns)
        columns = {}
        for key in picked:
            rows = db.read_attempt_rows(run, [key], 0, MAX_STEP).get(key)
            if rows is not None and len(rows):
                steps, values = rows.latest()
                columns[key] = pd.Series(values, index=pd.Index(steps, dtype="int64"))
    finally:
        if owned:
            db.close()
    frame = pd.DataFrame(columns)
    frame.index.name = "step"
    return frame.sort_index()


FORMAT = Format("gapwatch-export", lambda source, options: parse_export(source),
                lambda probe: not probe.is_dir and is_export(probe.path, probe.head),
                profile="gapwatch", own_keys=True)

__all__ = ["COLUMNS", "export_run", "history", "is_export", "parse_export", "chosen_keys"]
