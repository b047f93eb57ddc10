"""Generic metric logs: JSON Lines, CSV and Parquet files that any trainer can write.

Two shapes, told apart by their fields:
* long: one value per line, `{"step": 10, "key": "train/loss", "value": 2.5}` (also `metric` or
  `name` for the key), or CSV columns step,key,value;
* wide: one step per line, `{"step": 10, "train/loss": 2.5, "optim": {"lr": 1e-4}}` (nested objects
  become `optim/lr`), or a CSV with a step column and one column per metric.

The step field is the profile's `step_key` when it has one, else the first of `step`, `_step`,
`global_step`, `iteration`, `iter`, `trainer/global_step` that the file has. A step written as
progress text, `done/planned` (ms-swift's "340/9060"), is the steps done.

Rules (the same as for text logs, since these are appended by a running trainer):
* null or empty is "not logged"; NaN and Infinity (JSON's non-standard spellings and CSV's) are
  logged values; booleans become 1/0; text values are left out and counted.
* A line that is not valid JSON, or lacks the step, or has a step that is not a whole number, is an
  error naming the line. A last line without its newline is still being written and is left out.
* A line that logs a series at a lower step than that series last had is a restart: a new attempt,
  whose values win, and a `restart` event (logged_rows.py).

`stream_table` reads a log in chunks of whole steps, so memory is bounded by a chunk
(`table_stream`); `parse_jsonl` and `parse_generic_csv` collect the chunks into one ImportedRun.
The rules are applied line by line in `generic_rows`.
"""

from __future__ import annotations

from pathlib import Path

from . import parquet_table
from .formats import Format, Probe
from .generic_rows import MAX_COLUMNS, MAX_NESTING, STEP_FIELDS, step_field
from .imported_run import ImportedRun
from .lightning_csv import holds_logs
from .table_stream import TableStream

# A .json file that is not one JSON document (not lm-eval results, see `lm_eval_json`) is JSON Lines.
JSONL_SUFFIXES = (".json", ".jsonl", ".ndjson")


def stream_table(path: str | Path, fmt: str, step_key: str | None = None) -> TableStream:
    """A JSONL (`fmt="jsonl"`) or CSV (`"csv"`) log, to be read chunk by chunk."""
    return TableStream(path, fmt, step_key=step_key)


def parse_jsonl(path: str | Path, step_key: str | None = None) -> ImportedRun:
    return TableStream(path, "jsonl", step_key=step_key).collect()


def parse_generic_csv(path: str | Path, step_key: str | None = None) -> ImportedRun:
    return TableStream(path, "csv", step_key=step_key).collect()



JSONL = Format("jsonl", lambda source, options: parse_jsonl(source, step_key=options.step_key),
               lambda probe: probe.suffix in JSONL_SUFFIXES or probe.head.lstrip().startswith("{"),
               streamed=True)
def _is_csv(probe: Probe) -> bool:
    """A .csv or .tsv file, or a Lightning CSVLogger folder (its metrics.csv: `lightning_csv`)."""
    if probe.is_dir:
        return holds_logs(probe.path)
    return probe.suffix in (".csv", ".tsv")


def parse_parquet(path: str | Path, step_key: str | None = None) -> ImportedRun:
    return TableStream(path, "parquet", step_key=step_key).collect()


# After `gapwatch-export` in the registry: a Parquet table that is not one of ours.
PARQUET = Format("parquet", lambda source, options: parse_parquet(source, step_key=options.step_key),
                 lambda probe: not probe.is_dir and probe.suffix in parquet_table.SUFFIXES, streamed=True)

# After `wandb-csv` in the registry: a CSV that is not a W&B export.
CSV = Format("csv", lambda source, options: parse_generic_csv(source, step_key=options.step_key),
             _is_csv, streamed=True)

__all__ = ["CSV", "JSONL", "PARQUET", "JSONL_SUFFIXES", "MAX_COLUMNS", "MAX_NESTING", "STEP_FIELDS", "parse_generic_csv", "parse_jsonl", "parse_parquet",
           "step_field", "stream_table"]
