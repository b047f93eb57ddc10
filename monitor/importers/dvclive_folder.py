"""DVCLive's folder (`dvclive/`), read as one run.

DVCLive writes each `live.log_metric(name, value)` as a line of `plots/metrics/<name>.tsv` (the
name's slashes are folders): `timestamp` (milliseconds since the epoch, unless it was asked not
to), `step` and the value under the name's last part. `params.yaml` holds what `log_param(s)`
recorded (the run's config) and `metrics.json` the latest values (its summary). The folder, or the
project folder holding `dvclive/`, is the source.

The step is what the loop set `live.step` to (`next_step()` counts its calls): the trainer's step
where the loop keeps them one (Lightning's DVCLiveLogger does). The Hugging Face Trainer's callback
counts its log calls instead, so such a folder, whose params are the Trainer's TrainingArguments, is
refused with the reason (docs/importing.md). The lines of all the files are replayed in the order
they were written (their timestamps; file by file without them) under the restart rule of
logged_rows.py: a step lower than its series' last is a job started again in the folder.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from monitor.errors import GapwatchError

from .formats import Format, Probe
from .imported_run import ImportedRun
from .input_checks import printed_number, shown, step_digits, yaml_mapping
from .logged_rows import LoggedRows

FOLDER = "dvclive"
METRICS = Path("plots") / "metrics"
# TrainingArguments the Hugging Face Trainer's DVCLiveCallback records as params.
_HF_ARGS = {"per_device_train_batch_size", "logging_steps", "gradient_accumulation_steps"}


def live_folder(path: Path) -> Path | None:
    """The DVCLive folder a path names: itself, or its `dvclive/`; None when neither holds metrics."""
    for folder in (path, path / FOLDER):
        metrics = folder / METRICS
        if metrics.is_dir() and any(metrics.rglob("*.tsv")):
            return folder
    return None


def recognize(probe: Probe) -> bool:
    return probe.is_dir and live_folder(probe.path) is not None


def parse_dvclive(source: str | Path) -> ImportedRun:
    path = Path(source)
    folder = live_folder(path)
    if folder is None:
        raise GapwatchError(f"{path}: no {METRICS}/*.tsv here or in {FOLDER}/: not a DVCLive folder")
    notes: list[str] = []
    params = yaml_mapping(folder / "params.yaml", notes)
    if _HF_ARGS <= params.keys():
        raise GapwatchError(f"{folder}: written by the Hugging Face Trainer's DVCLive callback, which numbers its "
                            "rows by log call, not by the Trainer's step: import the run's trainer_state.json, or "
                            "report to TensorBoard, W&B or MLflow")
    rows = []  # (wall time or NaN, file order, line, step, name, value)
    for order, file in enumerate(sorted((folder / METRICS).rglob("*.tsv"))):
        name = file.relative_to(folder / METRICS).with_suffix("").as_posix()
        rows += [(wall, order, line, step, name, value) for line, step, value, wall in _lines(file, notes)]
    if not rows:
        raise GapwatchError(f"{folder}: its metric files hold no values")
    timed = all(math.isfinite(r[0]) for r in rows)
    logged = LoggedRows()
    for n, (wall, _, _, step, name, value) in enumerate(sorted(rows, key=lambda r: (r[0], r[1], r[2]) if timed
                                                              else (r[1], r[2]))):
        logged.at_step(n + 1, step)
        logged.add(step, name, value, wall / 1000.0)
    return ImportedRun(name_hint=(folder.parent.name if folder.name == FOLDER else folder.name) or folder.name,
                       scalars=logged.scalars(with_wall_time=timed), events=logged.events, source=str(folder),
                       config=params, summary=_summary(folder / "metrics.json"), notes=notes)


def _lines(file: Path, notes: list[str]):
    """(line, step, value, wall time in ms or NaN) of each line of one metric's file."""
    try:
        with open(file, encoding="utf-8", errors="replace", newline="") as fh:
            reader = csv.reader(fh, delimiter="\t")
            header = next(reader, [])
            if "step" not in header or len(header) < 2:
                notes.append(f"{file}: no step column: left out")
                return
            at_step, at_value = header.index("step"), len(header) - 1
            at_time = header.index("timestamp") if "timestamp" in header else None
            for number, fields in enumerate(reader, start=2):
                if len(fields) != len(header):
                    notes.append(f"{file}: line {number} has {len(fields)} fields, not {len(header)}: left out")
                    continue
                if not fields[at_step].strip().isdigit():
                    notes.append(f"{file}: line {number}: step {shown(fields[at_step])} is not a step: left out")
                    continue
                value = printed_number(fields[at_value])
                if value is None:
                    notes.append(f"{file}: line {number}: value {shown(fields[at_value])} is not a number: left out")
                    continue
                wall = printed_number(fields[at_time]) if at_time is not None else None
                yield number, step_digits(fields[at_step].strip(), f"{file}: line {number}"), value, (
                    wall if wall is not None else math.nan)
    except OSError as exc:
        raise GapwatchError(f"{file}: cannot read: {exc.strerror}") from None
    except csv.Error as exc:
        raise GapwatchError(f"{file}: not a tab-separated metric file: {exc}") from None


def _summary(file: Path) -> dict:
    try:
        doc = json.loads(file.read_text(errors="replace"))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


FORMAT = Format("dvclive", lambda source, options: parse_dvclive(source), recognize)

__all__ = ["FORMAT", "live_folder", "parse_dvclive"]
