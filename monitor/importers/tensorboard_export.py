"""Scalars downloaded from TensorBoard's web page: the links under a chart give one tag of one run a
file, as CSV (`Wall time,Step,Value`, a row a point) or as JSON (`[[wall_time, step, value], ...]`),
named `run-<run>-tag-<tag>.csv` (a `/` in the run or the tag written `_`; a browser adds ` (1)` to
a name it saved before).

* A file is one series, named by its tag (by its file name where that is not TensorBoard's); a
  folder of such files is one run's series. A folder of several runs' files (the part after
  `run-`) imports one of them, named with `--run`, or each with `--all-runs`. A run TensorBoard
  calls `.` (the log folder itself) is named after the folder the files are in.
* The page holds a sample of each tag, not every step (about 1,000 points unless TensorBoard was
  started with `--samples_per_plugin scalars=N`), drawn uniformly from the steps. A series logged
  at one cadence has one gap between its steps nearly everywhere; a sample has gaps of every
  length. A series whose commonest gap holds under half of its gaps is said to look sampled (the
  rule a W&B history sample is told by, `wandb/history_sample.py`): the run's event files hold every step.
* Steps are the ones the points were written at; of a step given twice, the later row wins.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from monitor.errors import GapwatchError

from .formats import Format, Probe, ReadOptions
from .imported_run import ImportedRun, scalars_frame
from .input_checks import shown
from .wandb.history_sample import HistorySample

HEADER = ["Wall time", "Step", "Value"]
SUFFIXES = (".csv", ".json")
_NAMED = re.compile(r"run-(?P<run>.*)-tag-(?P<tag>.+)")
_SAVED_AGAIN = re.compile(r" \(\d+\)$")
_JSON_HEAD = re.compile(r"\s*\[\s*\[\s*[-+0-9.eE]+\s*,\s*[0-9]+(?:\.0*)?\s*,")


def _is_export(path: Path, head: str | None = None) -> bool:
    """Whether a file is one of TensorBoard's scalar downloads, by its first bytes."""
    if path.suffix.lower() not in SUFFIXES:
        return False
    if head is None:
        try:
            with open(path, encoding="utf-8-sig", errors="replace") as fh:
                head = fh.read(4096)
        except OSError:
            return False
    head = head.lstrip("\ufeff")
    if path.suffix.lower() == ".csv":
        return head.splitlines()[:1] == [",".join(HEADER)]
    return bool(_JSON_HEAD.match(head)) or head.strip() == "[]"


def _exports(folder: Path) -> list[Path]:
    """The folder's CSV and JSON files, when every one of them is a TensorBoard download."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
    return files if files and all(_is_export(p) for p in files) else []


def recognize(probe: Probe) -> bool:
    if probe.is_dir:
        return bool(_exports(probe.path))
    return _is_export(probe.path, probe.head)


def _run_and_tag(path: Path) -> tuple[str | None, str]:
    """The run and the tag a download's name gives (run None for a file named otherwise)."""
    stem = _SAVED_AGAIN.sub("", path.stem)
    named = _NAMED.fullmatch(stem)
    return (named["run"], named["tag"]) if named else (None, stem)


def export_runs(source: str | Path) -> list[str]:
    """The runs a folder of downloads holds (one, or none for a single file)."""
    path = Path(source)
    if not path.is_dir():
        return []
    return sorted({run for run, _ in map(_run_and_tag, _exports(path)) if run is not None})


def parse_tensorboard_export(source: str | Path, options: ReadOptions = ReadOptions()) -> ImportedRun:
    """One download, or the downloads of one run in a folder (`options.source_run` names it where
    the folder holds several)."""
    path = Path(source)
    files = _exports(path) if path.is_dir() else [path]
    runs = export_runs(path)
    if options.source_run is not None:
        files = [f for f in files if _run_and_tag(f)[0] == options.source_run]
        if not files:
            raise GapwatchError(f"{path}: no downloads of run {options.source_run!r} here (runs: {', '.join(runs)})")
    elif len(runs) > 1:
        raise GapwatchError(f"{path}: TensorBoard downloads of {len(runs)} runs ({', '.join(runs)}): import one "
                            "with --run NAME, or each with --all-runs")
    frames, notes, names = [], [], {}
    for file in files:
        run, tag = _run_and_tag(file)
        if tag in names:
            raise GapwatchError(f"{file}: tag {tag!r} again (also {names[tag].name}); keep one of them")
        names[tag] = file
        if run is None:
            notes.append(f"{file.name}: not named as TensorBoard's Scalars page names a download (run-<run>-tag-<tag>), "
                         f"so its series is called {tag!r}: name the file after its tag")
        wall, steps, values = _points(file)
        frames.append(scalars_frame(steps, [tag] * len(steps), values, wall_time=wall))
        if _looks_sampled(steps):
            notes.append(f"{file.name}: {len(steps):,} points at irregular steps over {steps.min():,}..{steps.max():,}: "
                         "this looks like the sample of a tag TensorBoard's page holds, not every step; the run's "
                         "event files hold every step")
    scalars = pd.concat(frames, ignore_index=True)
    return ImportedRun(name_hint=_name(path, _run_and_tag(files[0])[0]), scalars=scalars, source=str(path),
                       notes=notes)


def _name(path: Path, run: str | None) -> str:
    """The run's name: its name in TensorBoard, else its folder's (for `.`, the log folder itself),
    else a lone file's stem."""
    if run not in (None, "."):
        return run
    if path.is_dir():
        return path.name
    return path.parent.name if run == "." else path.stem


def _looks_sampled(steps: np.ndarray) -> bool:
    """The module's rule, which is a W&B history sample's (`HistorySample`): enough steps, the
    commonest gap under half of the gaps."""
    seen = HistorySample("")
    seen.add(np.unique(steps))
    return seen.looks_sampled()


def _points(file: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(wall times, steps, values) of one download, as written."""
    rows = _json_rows(file) if file.suffix.lower() == ".json" else _csv_rows(file)
    wall, steps, values = [], [], []
    for number, row in rows:
        if len(row) != 3:
            raise GapwatchError(f"{file}: {number}: {len(row)} fields, not wall time, step and value")
        try:
            t, step, value = float(row[0]), float(row[1]), float(row[2])
        except (TypeError, ValueError):
            raise GapwatchError(f"{file}: {number}: {shown(row)} is not wall time, step and value") from None
        if not (math.isfinite(step) and step >= 0 and step == int(step)):
            raise GapwatchError(f"{file}: {number}: step {shown(row[1])} is not a whole number >= 0")
        wall.append(t)
        steps.append(int(step))
        values.append(value)
    return np.array(wall, dtype=float), np.array(steps, dtype=np.int64), np.array(values, dtype=float)


def _csv_rows(file: Path):
    with open(file, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)  # the header, checked when the file was recognised
        for row in reader:
            if row:
                yield f"line {reader.line_num}", row


def _json_rows(file: Path):
    try:
        points = json.loads(file.read_text(encoding="utf-8-sig"))
    except ValueError as exc:
        raise GapwatchError(f"{file}: not valid JSON: {exc}") from None
    if not isinstance(points, list) or not all(isinstance(p, list) for p in points):
        raise GapwatchError(f"{file}: not a list of [wall time, step, value] points")
    for i, point in enumerate(points):
        yield f"point {i + 1}", point


FORMAT = Format("tensorboard-export", parse_tensorboard_export, recognize, runs=export_runs)
