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
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from ..imported_run import scalars_frame
from ..name_codes import NameCodes
from ..step_axis import choose_step_key
from ..table_stream import CHUNK_ROWS, _last_step_start, _Rows
from .csv_export import separator

ROW_STEP = "_step"
WALL_TIME = "_timestamp"
# CSV bytes parsed at once (a few thousand rows of a 100-column export): each block's text
# columns, casts and row arrays are copies of it, so the peak grows with it (bench/RESULTS.md).
BLOCK_BYTES = 1 << 20


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
        self.chunk_rows = chunk_rows or CHUNK_ROWS
        self.columns = header(self.path)
        if len(set(self.columns)) != len(self.columns):
            dup = next(c for c in self.columns if self.columns.count(c) > 1)
            raise GapwatchError(f"{self.path}: column {dup!r} appears twice")
        others = [c for c in self.columns if c != ROW_STEP]
        self.step_key = choose_step_key(others, step_key, self.source)
        self.metrics = [c for c in self.columns
                        if not c.startswith("_") and c != self.step_key]
        self.notes: list[str] = []
        self.events: list[dict] = []
        self.bytes_read = 0
        self._names = NameCodes()
        self._names.codes(self.metrics)
        self._text: set[str] = set()
        self._numeric: set[str] = set()
        self._last_row_step: int | None = None
        self._step: float | None = None  # the trainer's step carried from the rows before
        self._attempt = 1
        self._rewinds = 0
        self._range: list[int] = []  # first and last row step
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
        pending: list[_Rows] = []
        waiting = rows = 0
        for block in self._blocks():
            pending.append(block)
            waiting += len(block)
            if waiting < self.chunk_rows:
                continue
            whole = _Rows.joined(pending)
            cut = _last_step_start(whole.steps)
            pending, waiting = [whole.part(cut, copy=True)], len(whole) - cut
            if cut:
                rows += cut
                yield self._frame(whole.part(0, cut))
        whole = _Rows.joined(pending) if pending else None
        if whole is not None and len(whole):
            rows += len(whole)
            yield self._frame(whole)
        if not rows:
            raise GapwatchError(f"{self.source}: no metric columns besides the step")
        self.notes = self._final_notes()

    def _frame(self, rows: _Rows) -> pd.DataFrame:
        keys = pd.Categorical.from_codes(rows.codes, categories=list(self._names.all))
        return scalars_frame(rows.steps, keys, rows.values, rows.attempts, wall_time=rows.walls)

    def _final_notes(self) -> list[str]:
        notes = [f"{self.path}: column {c!r} holds text, not numbers: left out"
                 for c in self.metrics if c in self._text]
        if self.step_key is not None and self._range:
            note = (f"step axis: {self.step_key} (the trainer's step); the source's own row "
                    f"counter ran {self._range[0]}..{self._range[1]}")
            if self._rewinds:
                note += f"; {self._rewinds} rewind(s) to an earlier step, each kept as a new attempt"
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
                    batch.column(self.step_key).null_count == batch.num_rows:
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
        if self.step_key is None:
            steps, attempts = row_steps, np.full(n, self._attempt, dtype=np.int64)
        else:
            steps, attempts = self._trainer_steps(batch.column(self.step_key), first_line)
        walls = np.full(n, np.nan)
        if WALL_TIME in self.columns:
            got, logged = self._numbers(batch.column(WALL_TIME), WALL_TIME, first_line,
                                        strict=False)
            walls[logged] = got[logged]
        names, values, logged = [], [], []
        for name in self.metrics:
            if name in self._text:
                continue
            got = self._numbers(batch.column(name), name, first_line, strict=True)
            if got is None:
                continue
            names.append(name)
            values.append(got[0])
            logged.append(got[1])
        if not names:
            empty = np.empty(0)
            return _Rows(empty.astype(np.int64), empty.astype(np.int64), empty,
                         empty.astype(np.int64), empty)
        line, col = np.nonzero(np.column_stack(logged))  # row-major: the order W&B logged
        codes = self._names.codes(names)
        return _Rows(steps[line], codes[col], np.column_stack(values)[line, col], attempts[line],
                     walls[line])

    def _row_steps(self, column: pa.Array, first_line: int) -> np.ndarray:
        got = self._numbers(column, ROW_STEP, first_line, strict=True, required=True)
        values = got[0]
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)) | (values < 0)
                             | (values > MAX_STEP))
        if len(bad):
            i = int(bad[0])
            raise GapwatchError(f"{self.path}: line {first_line + i}: step {values[i]!r} is not "
                                "a whole number >= 0")
        steps = values.astype(np.int64)
        previous = np.concatenate(([-1 if self._last_row_step is None else self._last_row_step],
                                   steps[:-1]))
        back = np.flatnonzero(steps <= previous)
        if len(back):
            i = int(back[0])
            raise GapwatchError(
                f"{self.path}: line {first_line + i}: step {steps[i]} after step {previous[i]}: "
                "W&B steps only grow, so the export is damaged or joins several runs")
        if len(steps):
            self._last_row_step = int(steps[-1])
            self._range = [self._range[0] if self._range else int(steps[0]), int(steps[-1])]
        return steps

    def _trainer_steps(self, column: pa.Array, first_line: int) -> tuple[np.ndarray, np.ndarray]:
        """The trainer's step of each row (a row without one takes the one before it; the first
        rows take the first one) and the attempt, which grows at each rewind."""
        got = self._numbers(column, self.step_key, first_line, strict=True)
        if got is None:
            raise GapwatchError(f"{self.path}: line {first_line}: step key {self.step_key!r} "
                                "holds text, not steps")
        values, logged = got
        bad = np.flatnonzero(logged & ~(np.isfinite(values) & (values >= 0)
                                        & (values == np.round(values))))
        if len(bad):
            i = int(bad[0])
            raise GapwatchError(f"{self.path}: line {first_line + i}: {self.step_key} is "
                                f"{values[i]!r}: not a whole number >= 0, so it cannot be the "
                                "step axis")
        filled = pd.Series(np.where(logged, values, np.nan))
        if self._step is not None:
            filled.iloc[0] = filled.iloc[0] if logged[0] else self._step
        steps = filled.ffill().bfill().to_numpy().astype(np.int64)
        previous = np.concatenate(([steps[0] if self._step is None else int(self._step)],
                                   steps[:-1]))
        back = steps < previous
        attempts = self._attempt + np.cumsum(back)
        self._rewinds += int(back.sum())
        self._attempt = int(attempts[-1])
        self._step = float(steps[-1])
        return steps, attempts.astype(np.int64)

    def _numbers(self, column: pa.Array, name: str, first_line: int, strict: bool,
                 required: bool = False):
        """(values, logged) of a text column: empty is not logged, NaN and infinities are values,
        true/false are 1/0. A column whose first logged cells are text is text (None); strict: a
        text cell after numbers is an error; else it is not logged."""
        logged = pc.is_valid(column).to_numpy(zero_copy_only=False)
        if required and not logged.all():
            i = int(np.flatnonzero(~logged)[0])
            raise GapwatchError(f"{self.path}: line {first_line + i}: no step in column {name!r}")
        try:
            values = pc.fill_null(pc.cast(column, pa.float64()), 0.0).to_numpy(
                zero_copy_only=False)
            if logged.any():
                self._numeric.add(name)
            return values, logged
        except pa.ArrowInvalid:
            pass
        text = column.to_pylist()
        values = np.full(len(text), np.nan)
        for i in np.flatnonzero(logged).tolist():
            cell = text[i].strip()
            if cell.lower() in ("true", "false"):
                values[i] = 1.0 if cell.lower() == "true" else 0.0
                continue
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
                    f"{self.path}: line {first_line + i}: column {name!r}: {text[i]!r} is not a "
                    "number")
            else:
                self._text.add(name)
                return None
        return values, logged


__all__ = ["WandbCsvStream", "streamable"]
