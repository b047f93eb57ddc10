"""A W&B history export (`_step` and one column per metric, often 100+ wide) read a block at a time.

pyarrow's CSV reader parses a block of a few MB into columns of text, each column becomes numbers
in one cast, and the block's logged cells become long rows (row by row, columns in order) with
their names as small integer codes: memory holds a block and a chunk of rows, whatever the width
and length of the file. `chunks()` hands them on as `table_stream.TableStream` does, so
`table_import` writes them into the store as it writes a generic log.

The rules are `csv_export`'s (this reads the same files the same way, see its tests), with one
difference a stream cannot avoid: a column is text (W&B media, tables) when its first logged cells
are text; it is left out and noted, and a text cell in a column that held numbers is an error
naming the line. Steps are the trainer's when the export has its step column (`step_axis`).

Cells are read as text and checked as text where a double would change them: a cell that casts
to an infinity but is no spelling of one (`1e309`, 400 digits) is refused, naming the line and
column, as `csv_export` refuses it; steps are cast to 64-bit integers, so a step beyond 2**53 is
kept exactly, and a step written so that a double would round it (`9007199254740993.0`) or beyond
2**63 - 1 is refused in one line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from ..imported_run import scalars_frame
from ..input_checks import cut, shown, unfit_literal, unnamed_columns
from ..logged_rows import SeriesAttempts
from ..name_codes import NameCodes
from ..step_axis import choose_step_key
from ..table_stream import CHUNK_ROWS, _Rows, step_chunks
from .csv_export import separator
from .history_sample import HistorySample, went_back

ROW_STEP = "_step"
WALL_TIME = "_timestamp"
# CSV bytes parsed at once (a few thousand rows of a 100-column export): each block's text
# columns, casts and row arrays are copies of it, so the peak grows with it (bench/RESULTS.md).
BLOCK_BYTES = 1 << 20
# A step cell a double holds exactly (at most 15 digits, below 2**53): `5`, `+5`, `5.0`.
_PLAIN_STEP = r"^\+?[0-9]{1,15}(\.0*)?$"


def header(path: str | Path) -> list[str]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return [h.strip() for h in next(csv.reader(fh, delimiter=separator(path)), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def streamable(path: str | Path) -> bool:
    """A history export: a `_step` column and no run-name prefixes (a panel export has `Step`)."""
    return ROW_STEP in header(path)


class WandbCsvStream:
    """One W&B history export; `chunks()` yields long frames (step, key, value, attempt,
    wall_time) with W&B's names; once it is exhausted, `notes` are complete."""

    def __init__(self, path: str | Path, step_key: str | None = None,
                 chunk_rows: int | None = None) -> None:
        self.path = Path(path)
        self.source = str(self.path)
        self.config: dict = {}  # a panel's export holds no run's settings
        self.chunk_rows = chunk_rows or CHUNK_ROWS
        self.columns = header(self.path)
        if len(set(self.columns)) != len(self.columns):
            dup = next(c for c in self.columns if self.columns.count(c) > 1)
            raise GapwatchError(f"{self.path}: column {dup!r} appears twice")
        unnamed, note = unnamed_columns(self.path, self.columns)
        others = [c for c in self.columns if c != ROW_STEP]
        self.step_key = choose_step_key(others, step_key, self.source)
        self.metrics = [c for i, c in enumerate(self.columns)
                        if not c.startswith("_") and c != self.step_key and i not in unnamed]
        self._unnamed_note = note
        self.notes: list[str] = []
        self.events: list[dict] = []
        self.bytes_read = 0
        self._names = NameCodes()
        self._names.codes(self.metrics)
        self._text: set[str] = set()
        self._numeric: set[str] = set()
        self._last_row_step: int | None = None
        self._step: int | None = None  # the trainer's step carried from the rows before
        self._attempts = SeriesAttempts()  # an export is one attempt until a rewind
        self._range: list[int] = []  # first and last row step
        self._sample = HistorySample(self.source)
        self._line = 2

    @property
    def name_hint(self) -> str:
        return self.path.stem

    @property
    def bytes_total(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def chunks(self) -> Iterator[pd.DataFrame]:
        rows = 0
        for frame in step_chunks(self._blocks(), self.chunk_rows, self._frame):
            rows += len(frame)
            yield frame
        if not rows:
            raise GapwatchError(f"{self.source}: {self._why_empty()}")
        self.notes = self._final_notes()

    def _why_empty(self) -> str:
        """Why a whole file gave no value, in the words of the whole-file reader (csv_export)."""
        if not self.metrics:
            return "no metric columns besides the step"
        with open(self.path, "rb") as f:
            data_lines = sum(1 for line in f if line.strip()) - 1
        return ("a header and no rows: no history to import" if data_lines <= 0
                else "every metric cell is empty: no history to import")

    def _frame(self, rows: _Rows) -> pd.DataFrame:
        keys = pd.Categorical.from_codes(rows.codes, categories=list(self._names.all))
        return scalars_frame(rows.steps, keys, rows.values, rows.attempts, wall_time=rows.walls)

    def _final_notes(self) -> list[str]:
        notes = [f"{self.path}: column {c!r} holds text, not numbers: left out"
                 for c in self.metrics if c in self._text]
        notes += [n for n in (self._unnamed_note, self._sample.note()) if n]
        if self.step_key is not None and self._range:
            note = (f"step axis: {self.step_key} (the trainer's step); the source's own row "
                    f"counter ran {self._range[0]}..{self._range[1]}")
            rewinds = self._attempts.attempt - 1
            if rewinds:
                note += f"; {rewinds} rewind(s) to an earlier step, each kept as a new attempt"
            notes.append(note)
        return notes

    # --- blocks ---------------------------------------------------------------------------------
    def _blocks(self) -> Iterator[_Rows]:
        types = {c: pa.string() for c in self.columns}
        try:
            reader = pa_csv.open_csv(
                self.path,
                read_options=pa_csv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
                parse_options=pa_csv.ParseOptions(delimiter=separator(self.path)),
                convert_options=pa_csv.ConvertOptions(
                    column_types=types, null_values=[""], strings_can_be_null=True,
                    quoted_strings_can_be_null=True),
                memory_pool=pa.system_memory_pool())
        except (OSError, pa.ArrowInvalid) as exc:
            raise GapwatchError(f"{self.path}: not a valid CSV file: {' '.join(str(exc).split())}") \
                from None
        held: list[pa.RecordBatch] = []
        with open(self.path, "rb") as sized:
            total = sized.seek(0, 2)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as exc:
                raise GapwatchError(f"{self.path}: not a valid CSV file: "
                                    f"{' '.join(str(exc).split())}") from None
            self.bytes_read = min(total, self.bytes_read + BLOCK_BYTES)
            if self.step_key is not None and self._step is None and \
                    _cells(batch.column(self.step_key)).null_count == batch.num_rows:
                held.append(batch)  # no trainer step yet: these rows take the first one
                continue
            if held:
                batch = pa.Table.from_batches([*held, batch]).combine_chunks().to_batches()[0]
                held = []
            yield self._block(batch)
        self.bytes_read = total
        if held:
            raise GapwatchError(f"{self.path}: step key {self.step_key!r} has no value in any row")

    def _block(self, batch: pa.RecordBatch) -> _Rows:
        first_line, n = self._line, batch.num_rows
        self._line += n
        row_steps = self._row_steps(batch.column(ROW_STEP), first_line)
        steps = row_steps if self.step_key is None else self._trainer_steps(batch.column(self.step_key), first_line)
        walls = np.full(n, np.nan)
        if WALL_TIME in self.columns:
            got, logged = self._numbers(batch.column(WALL_TIME), WALL_TIME, first_line,
                                        strict=False)
            walls[logged] = got[logged]
        names = [name for name in self.metrics if name not in self._text]
        got = self._all_numbers(batch, names, first_line)
        if got is None:  # column by column, as each column's cells need
            names, values, logged = [], [], []
            for name in self.metrics:
                if name in self._text:
                    continue
                one = self._numbers(batch.column(name), name, first_line, strict=True)
                if one is not None:
                    names.append(name)
                    values.append(one[0])
                    logged.append(one[1])
            got = (np.array(values), np.array(logged)) if names else None
        if got is None:
            empty = np.empty(0)
            return _Rows(empty.astype(np.int64), empty.astype(np.int64), empty,
                         empty.astype(np.int64), empty)
        values, logged = got  # a row a column: transposed, a row a line
        line, col = np.nonzero(logged.T)  # row-major: the order W&B logged
        codes = self._names.codes(names)
        # W&B's own step only grows; the trainer's goes back where a loop reloaded a checkpoint.
        attempts, _ = self._attempts.lines(n, line, col, names, steps[line])
        return _Rows(steps[line], codes[col], values.T[line, col], attempts[line], walls[line])

    def _all_numbers(self, batch: pa.RecordBatch, names: list[str],
                     first_line: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(values, logged) of the block's metric columns, a row a column, cast in one go: a
        100-column export costs a few calls a block rather than a few a column. None where a
        cell is more than a plain number or an empty cell (`_numbers` reads those)."""
        if not names:
            return None
        try:
            cast = pc.cast(pa.concat_arrays([batch.column(name) for name in names]), pa.float64())
        except pa.ArrowInvalid:
            return None
        shape = (len(names), batch.num_rows)
        logged = cast.is_valid().to_numpy(zero_copy_only=False).reshape(shape)
        values = cast.fill_null(0.0).to_numpy(zero_copy_only=False).reshape(shape)
        for column, row in zip(*np.nonzero(np.isinf(values))):
            self._refuse_unfit(batch.column(names[column])[row].as_py(), names[column], first_line + int(row))
        self._numeric.update(name for name, any_logged in zip(names, logged.any(axis=1)) if any_logged)
        return values, logged

    def _row_steps(self, column: pa.Array, first_line: int) -> np.ndarray:
        steps, _ = self._steps(column, ROW_STEP, first_line, required=True)
        previous = np.concatenate(([-1 if self._last_row_step is None else self._last_row_step],
                                   steps[:-1]))
        back = np.flatnonzero(steps <= previous)
        if len(back):
            i = int(back[0])
            raise GapwatchError(went_back(f"{self.path}: line {first_line + i}", steps[i], previous[i]))
        self._sample.add(steps)
        if len(steps):
            self._last_row_step = int(steps[-1])
            self._range = [self._range[0] if self._range else int(steps[0]), int(steps[-1])]
        return steps

    def _trainer_steps(self, column: pa.Array, first_line: int) -> np.ndarray:
        """The trainer's step of each row (a row without one takes the one before it; the first
        rows take the first one)."""
        values, logged = self._steps(column, self.step_key, first_line, required=False)
        # Carried forward as integers (a float would round steps beyond 2**53).
        at = np.maximum.accumulate(np.where(logged, np.arange(len(values)), -1))
        before = (self._step if self._step is not None
                  else int(values[np.flatnonzero(logged)[0]]))
        steps = np.where(at >= 0, values[np.maximum(at, 0)], before).astype(np.int64)
        self._step = int(steps[-1])
        return steps

    def _steps(self, column: pa.Array, name: str, first_line: int,
               required: bool) -> tuple[np.ndarray, np.ndarray]:
        """(steps as int64, logged) of a step column, exactly as written: integers are cast as
        integers, a step written otherwise (`5.0`, `1e17`) is read as a decimal, never rounded."""
        cells = _cells(column)
        try:
            ints = pc.cast(cells, pa.int64())
        except pa.ArrowInvalid:
            ints = None
        if ints is not None:
            logged = pc.is_valid(ints).to_numpy(zero_copy_only=False)
            steps = pc.fill_null(ints, 0).to_numpy(zero_copy_only=False)
            self._check_logged(logged, name, first_line, required)
            self._check_range(steps < 0, steps, name, first_line)
            return steps, logged
        got = self._numbers(column, name, first_line, strict=True, required=required)
        if got is None:
            raise GapwatchError(f"{self.path}: line {first_line}: step column {shown(name)} holds "
                                "text, not steps")
        values, logged = got
        if required:
            self._check_logged(logged & np.isfinite(values), name, first_line, required)
        steps = np.zeros(len(values), dtype=np.int64)
        plain = pc.fill_null(pc.match_substring_regex(cells, _PLAIN_STEP), False).to_numpy(
            zero_copy_only=False)
        steps[plain] = values[plain]
        # Any other cell (an exponent, digits a double rounds) is read exactly, as a decimal.
        for i in np.flatnonzero(logged & ~plain).tolist():
            text = cells[i].as_py()
            try:
                exact = Decimal(text)
            except InvalidOperation:
                exact = Decimal("nan")
            if not exact.is_finite() or exact != exact.to_integral_value():
                raise GapwatchError(f"{self.path}: line {first_line + i}: {_said(name)} "
                                    f"{cut(text)} is not a whole number")
            if not 0 <= exact <= MAX_STEP:
                raise GapwatchError(f"{self.path}: line {first_line + i}: {_said(name)} "
                                    f"{cut(text)} is outside the steps a store keeps (0 to "
                                    f"{MAX_STEP})")
            steps[i] = int(exact)
        return steps, logged

    def _check_logged(self, logged: np.ndarray, name: str, first_line: int,
                      required: bool) -> None:
        if required and not logged.all():
            i = int(np.flatnonzero(~logged)[0])
            raise GapwatchError(f"{self.path}: line {first_line + i}: no step in column "
                                f"{shown(name)}")

    def _check_range(self, out: np.ndarray, steps: np.ndarray, name: str,
                     first_line: int) -> None:
        if out.any():
            i = int(np.flatnonzero(out)[0])
            raise GapwatchError(f"{self.path}: line {first_line + i}: {_said(name)} {steps[i]:.0f} is "
                                f"outside the steps a store keeps (0 to {MAX_STEP})")

    def _numbers(self, column: pa.Array, name: str, first_line: int, strict: bool,
                 required: bool = False):
        """(values, logged) of a text column: empty is not logged, NaN and infinities are values,
        a number no double holds is an error (true/false are text, as in `csv_export`). A column
        whose first logged cells are text is text (None); strict: a text cell after numbers is an
        error; else it is not logged."""
        cells, values = column, None
        try:
            values = pc.cast(column, pa.float64())
        except pa.ArrowInvalid:
            cells = _cells(column)  # spaces around a number, or a blank cell, fail the cast
        logged = pc.is_valid(cells).to_numpy(zero_copy_only=False)
        if required and not logged.all():
            i = int(np.flatnonzero(~logged)[0])
            raise GapwatchError(f"{self.path}: line {first_line + i}: no step in column "
                                f"{shown(name)}")
        if values is None:
            try:
                values = pc.cast(cells, pa.float64())
            except pa.ArrowInvalid:
                values = self._cell_by_cell(cells.to_pylist(), logged, name, first_line, strict,
                                            required)
                if values is None:
                    return None
        if not isinstance(values, np.ndarray):
            values = pc.fill_null(values, 0.0).to_numpy(zero_copy_only=False)
            if logged.any():
                self._numeric.add(name)
        for i in np.flatnonzero(logged & np.isinf(values)).tolist():
            self._refuse_unfit(cells[i].as_py(), name, first_line + i)
        return values, logged

    def _refuse_unfit(self, text: str, name: str, line: int) -> None:
        """A cell a double cast read as an infinity: an error unless `inf` is what it says (the
        cast reads `1e309` and 400 digits as infinity too)."""
        if unfit_literal(text):
            raise GapwatchError(f"{self.path}: line {line}: column {shown(name)}: "
                                f"the number {shown(text)} does not fit a 64-bit float")

    def _cell_by_cell(self, text: list, logged: np.ndarray, name: str, first_line: int,
                      strict: bool, required: bool) -> np.ndarray | None:
        """The values of a block's column that holds something a cast does not read (text, or
        Python's float spellings): each cell on its own, as `_numbers` says; `logged` loses the
        text cells of a column that is not strict."""
        values = np.full(len(text), np.nan)
        for i in np.flatnonzero(logged).tolist():
            cell = text[i]
            try:
                values[i] = float(cell)
                self._numeric.add(name)
                continue
            except ValueError:
                pass
            if not strict:
                logged[i] = False
            elif name in self._numeric or required:
                raise GapwatchError(
                    f"{self.path}: line {first_line + i}: column {shown(name)}: {shown(cell)} is "
                    "not a number")
            else:
                self._text.add(name)
                return None
        return values


def _said(name: str) -> str:
    """A step column as a message names it: W&B's row counter is the step."""
    return "step" if name == ROW_STEP else name


def _cells(column: pa.Array) -> pa.Array:
    """A text column's cells trimmed, with blank cells null (not logged), as `csv_export` reads
    them."""
    cells = pc.utf8_trim_whitespace(column)
    return pc.if_else(pc.equal(cells, ""), pa.scalar(None, pa.string()), cells)


__all__ = ["WandbCsvStream", "streamable"]
