"""DeepSpeed's CSV monitor: the folder its `csv_monitor` settings write, `<output_path>/<job_name>/`.

DeepSpeed writes each series to a file of its own, named for the series with its `/` and spaces
made `_` (`Train/Samples/train_loss` -> `Train_Samples_train_loss.csv`). Each process appends to
it, first the header `step,<the name's last part>` (`step,train_loss`), then a row `step,value`
an event. The step is the one the series was logged at: for DeepSpeed's own series
(`Train/Samples/*`, `Train/Eigenvalues/*`) `global_samples`, the samples seen so far.
`sample_steps` places `Train/Samples/*` on optimizer steps, as it does for every format, and the
`deepspeed` profile names them.

Rules:
* A folder is this format's when it holds a non-empty `.csv` file and each of them begins with
  the header `step,<name>` and is named `<prefix>_<name>.csv` or `<name>.csv` (`<name>` with its
  spaces as `_`): a folder of other CSV files is not. Only the folder's own files are read.
* A series' name is rebuilt from its file's: the prefix with each `_` read as a `/`, then
  `/<name>` (`Train_Samples_train_loss.csv` -> `Train/Samples/train_loss`). DeepSpeed's own
  prefixes hold no `_`; an `_` or a space in a user's own prefix cannot be told from a `/`
  (`my_eval/loss` comes back as `my/eval/loss`).
* The header again inside a file is a process that resumed the job and appended to it: the rows
  after a file's n-th header are attempt n, and a `restart` event marks the first step attempt n
  logged (steps may go back there: the later attempt's values win). DeepSpeed's `Train/Samples/*`
  are logged at every optimizer step, so every process that logs writes each of their files: the
  n-th header of each is the same process's. A series a resumed process never logged (an
  eigenvalue it did not reach) has no header from it, so its later attempts are numbered lower.
  Within one process steps are taken as written: the later value of a repeated step wins.
* Rows are ordered by attempt, then step, then file, as DeepSpeed logs them step after step. A
  folder read while DeepSpeed is between the files of one step has that step in some files only:
  the step is left out, with a note, until a later read finds it whole (a series logged at each
  of the two steps before it and not at it yet tells), so `import --follow` or a second import
  into the same run stores the rows a whole read of the finished folder stores.
* A row that is not `step,value`, a step that is not a whole number, a header unlike the file's
  own, a `.csv` file that does not begin with DeepSpeed's header: an error naming the file and
  line. A value that is not a number (the text of a tensor a user logged) is left out, with a
  note a series. A blank line holds nothing. A last line without its newline, or an empty file,
  is still being written: left out, with a note.
"""

from __future__ import annotations

import csv
import math
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP, EventKind

from .formats import Format, Probe
from .imported_run import ImportedRun, scalars_frame
from .input_checks import check_source, csv_header, cut, printed_number, shown, step_digits, whole_lines

STEP = "step"
SUFFIX = ".csv"
# A step as a number of samples: written as an int, or as a float with nothing after the point.
_WHOLE = re.compile(r"([0-9]+)(?:\.0*)?")
# Digits of a step below which every number is one a store keeps (MAX_STEP has 19).
_BOUNDED_DIGITS = len(str(MAX_STEP))


def series_name(path: Path, header: list[str]) -> str | None:
    """The name of the series a file holds, from its name and its header (see the module's
    rules); None where the header is not DeepSpeed's `step,<name>` for a file named so."""
    if len(header) != 2 or header[0] != STEP or not header[1]:
        return None
    name, stem = header[1], path.stem
    written = name.replace(" ", "_")
    if stem == written:
        return name
    if not stem.endswith("_" + written):
        return None
    return f"{stem[:-len(written) - 1].replace('_', '/')}/{name}"


def recognize(probe: Probe) -> bool:
    """A folder whose CSV files are each one series of DeepSpeed's (see the module's rules)."""
    if not probe.is_dir:
        return False
    files = [f for f in _csv_files(probe.path) if f.is_file() and f.stat().st_size]
    return bool(files) and all(series_name(f, csv_header(f, ",")) for f in files)


def parse_deepspeed_csv(source: str | Path) -> ImportedRun:
    """One CSV monitor folder: every series, each row on its attempt, in the order they were
    logged (by attempt, then step)."""
    folder = Path(source)
    notes: list[str] = []
    logged = [s for s in (_read_series(f, notes) for f in _csv_files(folder)) if s is not None and len(s.steps)]
    if not logged:
        raise GapwatchError(f"{folder}: no DeepSpeed CSV monitor values here ({SUFFIX} files of `step,<name>` rows)")
    steps, codes, values, attempts = _columns(logged)
    order = np.lexsort((codes, steps, attempts))  # stable: a file's own order among equal rows
    order = _without_unfinished_step(folder, order, steps, codes, attempts, logged, notes)
    keys = pd.Categorical.from_codes(codes[order], categories=[s.key for s in logged])
    scalars = scalars_frame(steps[order], keys, values[order], attempts[order])
    return ImportedRun(name_hint=folder.name, scalars=scalars, source=str(folder), notes=notes,
                       events=_restarts(logged, steps[order], codes[order], attempts[order]))


def _csv_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise GapwatchError(f"{folder}: not a folder: DeepSpeed's CSV monitor writes a folder of {SUFFIX} files, "
                            f"import that folder")
    try:
        return sorted(f for f in folder.iterdir() if f.suffix == SUFFIX and not f.is_dir())
    except OSError as exc:
        raise GapwatchError(f"{folder}: cannot read: {exc.strerror}") from None


@dataclass
class _Series:
    """One file's series: each row's step, value and attempt (the number of headers above it),
    and the line of each attempt's header."""

    path: Path
    key: str
    header: list[str]
    steps: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))
    attempts: array = field(default_factory=lambda: array("q"))
    attempt: int = 1
    header_lines: dict[int, int] = field(default_factory=lambda: {1: 1})
    not_numbers: int = 0
    first_not_number: str = ""

    def add(self, number: int, cells: list[str]) -> None:
        """Line `number`, split into its cells."""
        step = self._step(number, cells[0]) if len(cells) == 2 else None
        if step is not None:
            self._value(number, step, cells[1])
        elif cells == self.header:
            self.attempt += 1
            self.header_lines[self.attempt] = number
        elif cells != [""]:  # a blank line holds nothing
            self._refuse(number, cells)

    def _step(self, number: int, text: str) -> int | None:
        """The step a row gives, None where it gives none; the store's bound is checked only for
        a step long enough to pass it (millions of rows are checked here)."""
        whole = _WHOLE.fullmatch(text)
        if whole is None:
            return None
        digits = whole[1]
        return int(digits) if len(digits) < _BOUNDED_DIGITS else step_digits(digits, f"{self.path}: line {number}")

    def _value(self, number: int, step: int, text: str) -> None:
        value = _number(text)
        if value is None:
            if not self.not_numbers:
                self.first_not_number = f"line {number}: {shown(text)}"
            self.not_numbers += 1
            return
        self.steps.append(step)
        self.values.append(value)
        self.attempts.append(self.attempt)

    def _refuse(self, number: int, cells: list[str]) -> None:
        where, row = f"{self.path}: line {number}", shown(",".join(cells))
        if len(cells) != 2:
            raise GapwatchError(f"{where}: {row} is not a `step,value` row")
        if cells[0] == STEP:
            raise GapwatchError(f"{where}: the header {row} differs from the file's own {shown(','.join(self.header))}")
        raise GapwatchError(f"{where}: step {shown(cells[0])} is not a whole number")

    def note(self) -> str | None:
        if not self.not_numbers:
            return None
        return (f"{self.path}: {self.key}: values that are not numbers left out: {self.not_numbers:,} "
                f"(the first, {self.first_not_number})")


def _number(text: str) -> float | None:
    """`printed_number`, a finite number (nearly every row) read first."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else printed_number(text)


def _read_series(path: Path, notes: list[str]) -> _Series | None:
    """A file's series; None for a file with no whole line yet (a note says so)."""
    check_source(path)
    lines = whole_lines(path, notes)
    first = next(lines, None)
    if first is None:
        if not path.stat().st_size:
            notes.append(f"{path}: empty (nothing logged yet): left out")
        return None
    header = _cells(path, *first)
    key = series_name(path, header)
    if key is None:
        raise GapwatchError(f"{path}: line 1: {shown(first[1])} is not the header DeepSpeed's CSV monitor writes "
                            f"for this file (`step,<name>`, the file named `<prefix>_<name>{SUFFIX}`)")
    series = _Series(path, key, header)
    for number, line in lines:
        series.add(number, _cells(path, number, line))
    notes.extend(n for n in (series.note(),) if n)
    return series


def _cells(path: Path, number: int, line: str) -> list[str]:
    """A line's cells. DeepSpeed's rows are numbers, so most hold no quote and split as they are;
    the csv module reads the rest (a name with a comma in it is written in quotes). A line is
    read alone, so that a stray quote never runs on into the lines after it."""
    if '"' not in line:
        return line.split(",")
    try:
        return next(csv.reader([line]), [""])
    except csv.Error as exc:
        raise GapwatchError(f"{path}: line {number}: not a CSV row ({exc}): {cut(line)}") from None


def _columns(logged: list[_Series]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every file's rows side by side: steps, the file's index (its series' code), values,
    attempts."""
    steps = np.concatenate([np.asarray(s.steps, dtype=np.int64) for s in logged])
    codes = np.concatenate([np.full(len(s.steps), i, dtype=np.int32) for i, s in enumerate(logged)])
    values = np.concatenate([np.asarray(s.values, dtype=np.float64) for s in logged])
    attempts = np.concatenate([np.asarray(s.attempts, dtype=np.int64) for s in logged])
    return steps, codes, values, attempts


def _without_unfinished_step(folder: Path, order: np.ndarray, steps: np.ndarray, codes: np.ndarray,
                             attempts: np.ndarray, logged: list[_Series], notes: list[str]) -> np.ndarray:
    """`order` less the rows of the last step while DeepSpeed is between its files: some series
    that logged each of the two steps before it has not logged it yet (one logged every step:
    an eigenvalue logged every few steps never logs two in a row). Those rows come with the read
    that finds the step whole, so a folder read mid-step and read again stores its rows once, in
    the order a whole read gives them."""
    last = attempts[order] == attempts[order[-1]]
    # Rows are in step order, a row a series a step: the last three steps' rows are among the
    # last three rows a series (a step written twice only leaves fewer steps in them, and then
    # nothing is left out).
    recent = order[last][-3 * len(logged):]
    distinct = np.unique(steps[recent])
    if len(distinct) < 3:
        return order
    before, just_before, final = distinct[-3:]
    at = {step: set(codes[recent][steps[recent] == step].tolist()) for step in (before, just_before, final)}
    missing = (at[before] & at[just_before]) - at[final]
    if not missing:
        return order
    names = ", ".join(sorted(logged[c].key for c in missing))
    notes.append(f"{folder}: step {int(final):,} has {len(at[final])} of its series so far (not yet {names}): "
                 "DeepSpeed is between the files of one step, so that step is left out until it is whole")
    return order[~(last & (steps[order] == final))]


def _restarts(logged: list[_Series], steps: np.ndarray, codes: np.ndarray, attempts: np.ndarray) -> list[dict]:
    """A `restart` event for each attempt after the first, at the first step it logged; the rows
    are in order of attempt, then step."""
    events = []
    for at in np.flatnonzero(attempts[1:] != attempts[:-1]) + 1:
        attempt, series = int(attempts[at]), logged[codes[at]]
        line = series.header_lines[attempt]
        events.append({
            "step": int(steps[at]), "kind": EventKind.RESTART.value, "attempt": attempt,
            "payload": {"reason": f"{series.path.name} has DeepSpeed's header again at line {line}: a process "
                                  f"resumed the job", "file": series.path.name, "line": line},
        })
    return events


FORMAT = Format("deepspeed-csv", lambda source, options: parse_deepspeed_csv(source), recognize, profile="deepspeed")
