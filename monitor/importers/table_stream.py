"""JSON Lines, CSV and Parquet metric logs read a block at a time, handed on in chunks of whole steps.

Memory is bounded by a chunk, not by the file: a 1.41M-step log is read in blocks of a few MB and
handed on as chunks of about CHUNK_ROWS rows. A chunk ends where the step changes, so every row of a
step is in one chunk: a repeated (key, step) of one attempt (always on neighbouring lines, since
within an attempt steps never go back) stays in one chunk, where the later value wins.

Each block takes a fast path when it is plain numbers: pyarrow's JSON reader for a block of flat
objects, one vectorised conversion per CSV column. Anything else (nested objects, text values,
long rows, a bad line) goes through the exact line-by-line reading of `generic_rows`, which also
says what is wrong with a bad line. Both give the same rows in file order; within one JSON line the
fast path orders the values as the block's columns, which differs from the line's own order only
where lines order their names differently (nothing depends on the order within a line: the store
and the fingerprint see a set of rows, and the rows imported before are whole lines).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .generic_rows import (
    KEY_FIELDS, LONG_VALUE_FIELD, MAX_COLUMNS, MAX_NESTING, TIME_FIELDS, RowBuilder, step_field,
)
from .hparams_file import read_hparams
from .lightning_csv import run_logs
from .imported_run import ImportedRun, scalars_frame
from . import parquet_table
from .csv_cells import cell_numbers, leading_spaces_cut, numbers, plain_numbers, whole_steps
from .input_checks import UnfitNumber, loads, repeated_name, shown, unnamed_columns
from .name_codes import NameCodes
from .wandb.csv_export import separator

# Rows per chunk handed on and written in one call (10,000 steps of a 10-metric log). Peak memory
# grows with it (the store's write of a chunk makes several copies of it); at 1.41M steps, 200,000
# rows were about 15% faster than 100,000 and held 50 MB more.
CHUNK_ROWS = 100_000
# JSONL bytes parsed at once (about 6,000 lines of a 10-metric log). pyarrow's reader keeps
# buffers of several times a block, and threads each take their own: 8 MB blocks on two threads
# held 90 MB more at their peak than 2 MB on one, for no gain in speed.
BLOCK_BYTES = 2 << 20
# CSV bytes parsed at once, as the W&B export's reader does (wandb/csv_stream.py): each block's
# text columns, casts and row arrays are copies of it.
CSV_BLOCK_BYTES = 1 << 20
_NUMERIC = (pa.int64(), pa.float64(), pa.bool_(), pa.null())
_BOM = b"\xef\xbb\xbf"


@dataclass
class _Rows:
    """Long rows as parallel arrays; keys are codes into the stream's list of names."""

    steps: np.ndarray
    codes: np.ndarray
    values: np.ndarray
    attempts: np.ndarray
    walls: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def part(self, lo: int, hi: int | None = None, copy: bool = False) -> "_Rows":
        return _Rows(*(a[lo:hi].copy() if copy else a[lo:hi] for a in self._arrays()))

    def _arrays(self):
        return self.steps, self.codes, self.values, self.attempts, self.walls

    @staticmethod
    def joined(parts: list["_Rows"]) -> "_Rows":
        if len(parts) == 1:
            return parts[0]
        return _Rows(*(np.concatenate(cols) for cols in zip(*(p._arrays() for p in parts))))


class TableStream:
    """One JSONL or CSV log. `chunks()` yields long frames (step, key, value, attempt, wall_time)
    with the source's names; once it is exhausted, `events` and `notes` are complete.

    A CSV log may be named by a Lightning CSVLogger folder (`lightning_csv`): its metrics.csv, or
    the logs of a run resumed in several version folders, read one after the other."""

    def __init__(self, path: str | Path, fmt: str, step_key: str | None = None,
                 chunk_rows: int | None = None) -> None:
        if fmt not in ("jsonl", "csv", "parquet"):
            raise ValueError(f"not a table format: {fmt}")
        given = Path(path)
        self.files = run_logs(given, step_key) if fmt == "csv" and given.is_dir() else [given]
        self.path = self.files[0]  # the file being read
        self.fmt = fmt
        # A version folder's log is the same source as its metrics.csv named itself.
        self.source = str(given if len(self.files) > 1 else self.path)
        # The run's folder, as TensorBoard's version folders are named.
        self.name_hint = self.path.parent.name if given.is_dir() else given.stem
        self.step_key = step_key
        self.chunk_rows = chunk_rows or CHUNK_ROWS
        self.builder = RowBuilder(self.source)
        self.notes: list[str] = []
        # Lightning's CSVLogger writes the run's hyperparameters beside metrics.csv.
        self.config, self._unread_config = read_hparams(self.path.parent)
        self.bytes_read = 0
        self._bytes_before = 0  # the sizes of the files read before `path`
        self._names = NameCodes()
        self._repeated = 0
        self._first_repeat: tuple[str, int] | None = None
        self._partial_line: int | None = None
        self._unnamed: list[str] = []

    @property
    def events(self) -> list[dict]:
        return self.builder.rows.events

    @property
    def bytes_total(self) -> int:
        return sum(map(_size, self.files))

    def chunks(self) -> Iterator[pd.DataFrame]:
        rows = 0
        for frame in step_chunks(self._blocks(), self.chunk_rows, self._frame):
            rows += len(frame)
            yield frame
        if not rows:
            raise GapwatchError(f"{self.source}: no metric values found")
        self.notes = self._final_notes()

    def _blocks(self) -> Iterator[_Rows]:
        """Each file's blocks in turn: the attempts and last steps carry on from one to the next,
        so a resumed launch that goes back is a restart."""
        for path in self.files:
            self.path = path
            self.builder.source = str(path)  # a bad line is named in its own file
            told = len(self.events)
            yield from {"jsonl": self._jsonl_blocks, "csv": self._csv_blocks, "parquet": self._parquet_blocks}[self.fmt]()
            if len(self.files) > 1:  # a restart's line is in its launch's own file
                for event in self.events[told:]:
                    event["payload"]["file"] = f"{path.parent.name}/{path.name}"
            self._bytes_before += _size(path)
            self.bytes_read = self._bytes_before

    def collect(self) -> ImportedRun:
        """The whole log as one ImportedRun (what `load` returns)."""
        frames = list(self.chunks())
        whole = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        scalars = scalars_frame(whole["step"], whole["key"].astype(str).to_numpy(), whole["value"],
                                whole["attempt"],
                                wall_time=whole["wall_time"] if self.builder.any_time else None)
        return ImportedRun(name_hint=self.name_hint, scalars=scalars, config=dict(self.config), events=self.events,
                           source=self.source, notes=list(self.notes))

    # --- chunks --------------------------------------------------------------------------------
    def _frame(self, rows: _Rows) -> pd.DataFrame:
        keys = pd.Categorical.from_codes(rows.codes, categories=list(self._names.all))
        frame = scalars_frame(rows.steps, keys, rows.values, rows.attempts, wall_time=rows.walls)
        # A repeat of the value a later line gives again loses nothing (Lightning's CSVLogger
        # writes `epoch` twice at an epoch's last step); only a value that a different one
        # replaces is told.
        same_cell = ["key", "step", "attempt"]
        repeated = frame.duplicated(same_cell, keep="last")
        if repeated.any():
            kept = frame.groupby(same_cell, observed=True, sort=False)["value"].transform("last")
            same = (frame["value"] == kept) | (frame["value"].isna() & kept.isna())
            repeated &= ~same
        if repeated.any():
            if self._first_repeat is None:
                i = int(np.flatnonzero(repeated.to_numpy())[0])
                self._first_repeat = (str(frame["key"].iloc[i]), int(frame["step"].iloc[i]))
            self._repeated += int(repeated.sum())
        return frame

    def _final_notes(self) -> list[str]:
        notes = [n for n in [self.builder.skipped_note(), self._unread_config] if n] + self._unnamed
        if len(self.files) > 1:
            notes.append(f"{self.source}: {len(self.files)} launches of one run, each resumed where an earlier "
                         "one had got to: " + ", ".join(f.parent.name for f in self.files))
        if self._repeated:
            key, step = self._first_repeat
            notes.append(f"{self.source}: {self._repeated:,} values of a metric at a step a later line "
                         f"gives another value for (first: {key} at step {step}); the last value wins")
        if self._partial_line is not None:
            notes.append(f"{self.source}: line {self._partial_line} has no newline yet (still "
                         "being written): left out")
        return notes

    def _taken(self) -> _Rows:
        """What the line-by-line reader added since the last call, as arrays."""
        frame = self.builder.rows.take()
        local, uniques = pd.factorize(frame["key"])
        codes = self._names.codes(list(uniques))[local] if len(frame) else np.empty(0, dtype=np.int64)
        return _Rows(frame["step"].to_numpy(), codes, frame["value"].to_numpy(),
                     frame["attempt"].to_numpy(), frame["wall_time"].to_numpy())

    def _wide(self, first_line: int, steps: np.ndarray, walls: np.ndarray, names: list[str],
              values: np.ndarray, logged: np.ndarray) -> _Rows:
        """Rows of a block read as columns (values and logged mask, a row a name), in file order;
        the block's checks have passed, so the stream's state moves on here."""
        self.builder.names.update(n for n, any_logged in zip(names, logged.any(axis=1)) if any_logged)
        attempts = self.builder.rows.at_steps(first_line, steps, names, logged)
        if np.isfinite(walls).any():
            self.builder.any_time = True
        if not names:
            return self._taken()
        line, col = np.nonzero(logged.T)  # row-major: line by line, columns in order
        return _Rows(steps[line], self._names.codes(names)[col], values.T[line, col], attempts[line],
                     walls[line])

    def _fits_columns(self, names: list[str]) -> bool:
        return len(self.builder.names.union(names)) <= MAX_COLUMNS

    # --- JSON Lines ----------------------------------------------------------------------------
    def _jsonl_blocks(self) -> Iterator[_Rows]:
        try:
            fh = open(self.path, "rb")
        except OSError as exc:
            raise GapwatchError(f"{self.path}: cannot read: {exc.strerror}") from None
        line = 1
        carry = b""
        with fh:
            while True:
                try:
                    data = fh.read(BLOCK_BYTES)
                except OSError as exc:
                    raise GapwatchError(f"{self.path}: cannot read: {exc.strerror}") from None
                if self.bytes_read == 0 and data.startswith(_BOM):
                    data = data[len(_BOM):]  # a UTF-8 byte-order mark (Windows editors) is no text
                    self.bytes_read = len(_BOM)
                self.bytes_read += len(data)
                more = bool(data)
                # A \r that may be the first half of a \r\n waits for the next read.
                held = b"\r" if data.endswith(b"\r") else b""
                data = _newlines(carry + data[:len(data) - len(held)])
                end = data.rfind(b"\n") + 1
                block, carry = data[:end], data[end:] + held
                if block:
                    lines = block.count(b"\n")
                    yield self._jsonl_block(block, line, lines)
                    line += lines
                if not more:
                    break
        if carry:
            self._utf8(carry)
            if carry.strip():
                self._partial_line = line

    def _utf8(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise GapwatchError(f"{self.path}: not a UTF-8 text file") from None

    def _jsonl_block(self, block: bytes, first_line: int, lines: int) -> _Rows:
        text = self._utf8(block)
        fast = self._flat_jsonl(block, first_line, lines)
        if fast is not None:
            return fast
        for number, line in enumerate(text.split("\n")[:-1], start=first_line):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except UnfitNumber as exc:
                raise GapwatchError(f"{self.path}: line {number}: {exc.describe()}") from None
            except json.JSONDecodeError as exc:
                raise GapwatchError(f"{self.path}: line {number}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise GapwatchError(f"{self.path}: line {number}: nested far deeper than "
                                    f"{MAX_NESTING} levels: not a metric log") from None
            if not isinstance(obj, dict):
                raise GapwatchError(f"{self.path}: line {number}: expected a JSON object")
            self.builder.add_object(number, obj, self.step_key)
        return self._taken()

    def _flat_jsonl(self, block: bytes, first_line: int, lines: int) -> _Rows | None:
        """A block of flat objects of numbers, read by pyarrow; None when it is anything else."""
        if not _one_object_a_line(block, lines):
            return None
        options = pa_json.ReadOptions(block_size=len(block) + 1, use_threads=False)
        try:
            # The system allocator hands freed blocks back to the process; arrow's default pool
            # keeps them, which adds to the import's peak.
            table = pa_json.read_json(io.BytesIO(block), read_options=options,
                                      memory_pool=pa.system_memory_pool())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # duplicate names in an object, a line that is not an object, ...
        if table.num_rows != lines:
            return None  # blank lines: line numbers would not match
        names = table.column_names
        field = step_field(names, self.step_key)
        if field is None or (LONG_VALUE_FIELD in names and any(k in names for k in KEY_FIELDS)):
            return None
        step_col = table.column(field)
        if step_col.type != pa.int64() or step_col.null_count:
            return None
        steps = step_col.to_numpy()
        if len(steps) and (steps.min() < 0 or steps.max() > MAX_STEP):
            return None
        walls = np.full(len(steps), math.nan)
        for f in reversed(TIME_FIELDS):  # the first time field a line has wins
            if f in names:
                col = table.column(f)
                if col.type not in (pa.int64(), pa.float64(), pa.null()):
                    return None
                got, logged = _arrow_values(col)
                ok = logged & np.isfinite(got)
                walls[ok] = got[ok]
        metric_names = [n for n in names if n != field and n not in TIME_FIELDS]
        if any(table.column(n).type not in _NUMERIC for n in metric_names):
            return None
        columns = [_arrow_values(table.column(n)) for n in metric_names]
        if any(np.isinf(values).any() for values, _ in columns):
            return None  # pyarrow reads 1e309 as infinity: the exact reading refuses it
        values, logged = _stacked(columns)
        if not self._fits_columns([n for n, m in zip(metric_names, logged.any(axis=1)) if m]):
            return None
        return self._wide(first_line, steps, walls, metric_names, values, logged)

    # --- CSV -----------------------------------------------------------------------------------
    def _csv_blocks(self) -> Iterator[_Rows]:
        header = _csv_header(self.path)
        unnamed, note = unnamed_columns(self.path, header)
        named = [i for i in range(len(header)) if i not in unnamed]
        self._unnamed += [note] if note else []
        rows = 0
        if _arrow_reads(self.path, header):
            for batch in self._arrow_batches(header, [header[i] for i in named]):
                if batch is None:
                    break  # pyarrow cannot read on from here: pandas does, from the same row
                yield self._csv_block(batch, 2 + rows)
                rows += batch.num_rows
            else:
                return
        yield from self._pandas_csv_blocks(len(header), rows, named if header else None)

    def _arrow_batches(self, header: list[str], named: list[str]) -> Iterator[pa.RecordBatch | None]:
        """Blocks of the file as columns of text, parsed by pyarrow; None where it refuses the
        rest (a row of another width, a line break inside quotes, bad UTF-8) or reaches a block
        with a blank line (a row of empty cells to pyarrow, none to pandas), so that every row
        handed on before is one line of the file."""
        try:
            reader = pa_csv.open_csv(
                self.path, read_options=pa_csv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False),
                parse_options=pa_csv.ParseOptions(delimiter=separator(self.path), ignore_empty_lines=False),
                # Every cell as text: cells are checked as text (csv_cells).
                convert_options=pa_csv.ConvertOptions(column_types={h: pa.string() for h in header},
                                                      include_columns=named, strings_can_be_null=False),
                memory_pool=pa.system_memory_pool())
        except (OSError, pa.ArrowInvalid):
            yield None
            return
        total = self._bytes_before + _size(self.path)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                self.bytes_read = total
                return
            except pa.ArrowInvalid:
                yield None
                return
            if _blank_line(batch):
                yield None
                return
            self.bytes_read = min(total, self.bytes_read + CSV_BLOCK_BYTES)
            yield batch

    def _pandas_csv_blocks(self, width: int, skip: int, named: list[int] | None) -> Iterator[_Rows]:
        """The file's rows after the first `skip`, read by pandas in blocks of whole rows, of the
        columns `named` (None: all)."""
        try:
            fh = open(self.path, "rb")
        except OSError as exc:
            raise GapwatchError(f"{self.path}: cannot read: {exc}") from None
        with fh:
            try:
                reader = pd.read_csv(fh, dtype=str, keep_default_na=False, na_values=[],
                                     skipinitialspace=True, sep=separator(self.path),
                                     encoding="utf-8", skiprows=range(1, skip + 1), usecols=named,
                                     chunksize=max(1, self.chunk_rows // max(width, 1)))
            except pd.errors.EmptyDataError:
                raise GapwatchError(f"{self.path}: empty file") from None
            except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
                raise self._csv_error(exc) from None
            line = 2 + skip
            while True:
                try:
                    table = next(reader, None)
                except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
                    raise self._csv_error(exc) from None
                self.bytes_read = self._bytes_before + fh.tell()
                if table is None:
                    break
                yield self._frame_block(table, line)
                line += len(table)

    # --- Parquet -------------------------------------------------------------------------------
    def _parquet_blocks(self) -> Iterator[_Rows]:
        """The table a batch of rows at a time; a row's number stands for its line."""
        size = _size(self.path)
        rows, batches = parquet_table.batches(self.path, values=self.chunk_rows)
        row = 1
        for batch in batches:
            yield self._parquet_block(batch, row)
            row += batch.num_rows
            self.bytes_read = self._bytes_before + (size * (row - 1) // rows if rows else size)

    def _parquet_block(self, batch: pa.RecordBatch, first_row: int) -> _Rows:
        """A batch read a column at a time where its step and metrics are numbers (a column of
        anything else left out and counted); else row by row, which says what is wrong."""
        by_name = dict(parquet_table.columns(batch))
        numeric = [n for n, c in by_name.items() if parquet_table.is_numeric(c)]
        times_read = all(n in numeric for n in TIME_FIELDS if n in by_name)  # else: a timestamp column
        if times_read and step_field(numeric, self.step_key) == step_field(list(by_name), self.step_key):
            fast = self._plain(numeric, parquet_table.whole_steps, by_name.__getitem__,
                               lambda name, strict: _arrow_values(by_name[name]), first_row)
            if fast is not None:
                for name, column in by_name.items():
                    if name not in numeric and len(column) > column.null_count:
                        self.builder.skipped[name] = self.builder.skipped.get(name, 0) + len(column) - column.null_count
                return fast
        for number, row in enumerate(batch.to_pylist(), start=first_row):
            self.builder.add_object(number, row, self.step_key)
        return self._taken()

    def _csv_error(self, exc: Exception) -> GapwatchError:
        if isinstance(exc, pd.errors.ParserError):
            return GapwatchError(f"{self.path}: not a valid CSV file: {' '.join(str(exc).split())}")
        return GapwatchError(f"{self.path}: cannot read: {exc}")

    def _csv_block(self, batch: pa.RecordBatch, first_line: int) -> _Rows:
        fast = self._plain_csv(batch, first_line)
        if fast is not None:
            return fast
        names = batch.schema.names
        cells = [leading_spaces_cut(batch.column(i)) for i in range(batch.num_columns)]
        for number, row in enumerate(zip(*cells), start=first_line):
            self.builder.add_object(number, dict(zip(names, row)), self.step_key, from_csv=True)
        return self._taken()

    def _plain_csv(self, batch: pa.RecordBatch, first_line: int) -> _Rows | None:
        """A block whose cells are whole steps and numbers (or empty), converted a column at a
        time (csv_cells); None when any cell needs the line-by-line reading."""
        def read(name: str, strict: bool):
            return numbers(batch.column(name), strict=strict)

        def read_metrics(names: list[str]):
            """Every metric column in one cast: a 100-column log costs a few calls a block, not a
            few a column; the rules are a column's, and so is the answer where a cell breaks them."""
            got = plain_numbers(pa.concat_arrays([batch.column(n) for n in names]))
            if got is None:
                return _stacked([read(n, True) for n in names])
            shape = (len(names), batch.num_rows)
            return got[0].reshape(shape), got[1].reshape(shape)

        return self._plain(batch.schema.names, whole_steps, lambda name: batch.column(name), read, first_line,
                           read_metrics)

    def _frame_block(self, table: pd.DataFrame, first_line: int) -> _Rows:
        fast = self._plain_frame(table, first_line)
        if fast is not None:
            return fast
        columns = list(table.columns)
        for number, row in enumerate(table.itertuples(index=False, name=None), start=first_line):
            self.builder.add_object(number, dict(zip(columns, row)), self.step_key, from_csv=True)
        return self._taken()

    def _plain_frame(self, table: pd.DataFrame, first_line: int) -> _Rows | None:
        """`_plain_csv` of a block pandas read."""
        def steps_of(cells) -> np.ndarray | None:
            try:
                return np.array([int(s) for s in cells.tolist()], dtype=np.int64)
            except (ValueError, OverflowError):
                return None

        def read(name: str, strict: bool):
            return _csv_values(table[name], strict=strict)

        return self._plain([str(c) for c in table.columns], steps_of, lambda name: table[name], read, first_line)

    def _plain(self, names: list[str], steps_of, column, read, first_line: int,
               read_metrics=None) -> _Rows | None:
        """The column-at-a-time reading both CSV readers share: `steps_of(column(step field))`
        gives whole steps (None: not all are), `read(name, strict)` a column's numbers and which
        cells were logged (strict: None or UnfitNumber when a cell is not a number);
        `read_metrics(names)`, where given, all the metric columns' at once, a row a column."""
        field = step_field(names, self.step_key)
        if field is None or (LONG_VALUE_FIELD in names and any(k in names for k in KEY_FIELDS)):
            return None
        steps = steps_of(column(field))
        if steps is None or (len(steps) and (steps.min() < 0 or steps.max() > MAX_STEP)):
            return None
        walls = np.full(len(steps), math.nan)
        for f in reversed(TIME_FIELDS):
            if f in names:
                try:
                    got = read(f, True)
                except UnfitNumber:
                    return None
                if got is None:
                    return None  # a time written as text: read line by line (generic_rows)
                got, logged = got
                ok = logged & np.isfinite(got)
                walls[ok] = got[ok]
        metric_names = [n for n in names if n != field and n not in TIME_FIELDS]
        try:
            got = (read_metrics(metric_names) if read_metrics is not None and metric_names
                   else _stacked([read(n, True) for n in metric_names]))
        except UnfitNumber:
            return None  # the exact reading names its line
        if got is None:
            return None
        values, logged = got
        if not self._fits_columns([n for n, m in zip(metric_names, logged.any(axis=1)) if m]):
            return None
        return self._wide(first_line, steps, walls, metric_names, values, logged)

def step_chunks(blocks: Iterable[_Rows], chunk_rows: int,
                frame: Callable[[_Rows], pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """`frame` of about `chunk_rows` rows at a time of the blocks' rows, each chunk ending where
    the step changes: every row of a step is in one chunk (the JSONL and CSV logs' streams and
    the W&B export's share this)."""
    pending: list[_Rows] = []
    waiting = 0
    for block in blocks:
        pending.append(block)
        waiting += len(block)
        if waiting < chunk_rows:
            continue
        whole = _Rows.joined(pending)
        cut = _last_step_start(whole.steps)
        # The rows of the last step wait for the next block, copied so `whole` can go.
        pending, waiting = [whole.part(cut, copy=True)], len(whole) - cut
        if cut:
            yield frame(whole.part(0, cut))
    whole = _Rows.joined(pending) if pending else None
    if whole is not None and len(whole):
        yield frame(whole)


def _one_object_a_line(block: bytes, lines: int) -> bool:
    """Every line of the block starts an object and holds no other object or list: what pyarrow's
    JSON reader takes safely (a line of `null`, or nesting thousands deep, crash the process).
    A block that fails this is read line by line, which says what is wrong with it."""
    return (block.startswith(b"{") and block.count(b"\n{") == lines - 1
            and block.count(b"{") == lines and b"[" not in block)


def _newlines(data: bytes) -> bytes:
    """\r\n and \r as \n, as reading the file as text did."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if b"\r" in data else data


def _last_step_start(steps: np.ndarray) -> int:
    """Index of the first row of the trailing run of rows at the last step."""
    other = np.flatnonzero(steps != steps[-1]) if len(steps) else np.empty(0)
    return int(other[-1]) + 1 if len(other) else 0


def _arrow_values(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values as float64, logged) of a numeric column: null is "not logged", NaN is a value."""
    logged = pc.is_valid(col).to_numpy(zero_copy_only=False)
    if col.type == pa.null():
        return np.full(len(col), math.nan), logged
    # Unchecked: an integer beyond 2**53 rounds to the nearest float, as float() rounds it.
    values = pc.fill_null(col.cast(pa.float64(), safe=False), 0.0).to_numpy(zero_copy_only=False)
    return values, logged


def _stacked(columns: list[tuple[np.ndarray, np.ndarray] | None]) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, logged) of columns read one at a time, a row a column; None when one is None."""
    if any(c is None for c in columns):
        return None
    if not columns:
        return np.empty((0, 0)), np.empty((0, 0), dtype=bool)
    return np.array([v for v, _ in columns]), np.array([m for _, m in columns])


def _csv_values(cells: pd.Series, strict: bool):
    """(values, logged) of a CSV column read by pandas, by `csv_cells.numbers`' rules."""
    text = cells.to_numpy(dtype=object)
    logged = cells.str.strip().to_numpy() != ""
    values = np.full(len(text), math.nan)
    try:
        values[logged] = text[logged].astype(np.float64)  # float() of each cell, as the rules say
        if not np.isinf(values).any():
            return values, logged
    except ValueError:
        pass
    return cell_numbers(list(text), logged, strict)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _csv_header(path: Path) -> list[str]:
    """The CSV's header, refusing one wider than MAX_COLUMNS before parsing (millions of columns
    take minutes before anything could be said); empty when it cannot be read (pandas then says
    what is wrong with the file)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh, delimiter=separator(path)), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    if len(header) > MAX_COLUMNS + 1:
        raise GapwatchError(f"{path}: {len(header):,} columns; at most {MAX_COLUMNS:,} metrics are "
                            "read from one file")
    repeated = repeated_name(header)
    if repeated is not None:
        raise GapwatchError(f"{path}: column {shown(repeated)} appears twice in the header")
    return header


def _blank_line(batch: pa.RecordBatch) -> bool:
    """Whether a row of the block has every cell empty (a blank line, or one of delimiters only)."""
    empty = pc.equal(batch.column(0), "")
    if not pc.any(empty).as_py():
        return False
    for i in range(1, batch.num_columns):
        empty = pc.and_(empty, pc.equal(batch.column(i), ""))
    return bool(pc.any(empty).as_py())


def _arrow_reads(path: Path, header: list[str]) -> bool:
    """Whether pyarrow's reader sees this header as pandas' does: names with no spaces to skip
    before them, no quotes and no byte-order mark, and at least a step and a metric (a blank line
    of a one-column file would be a row to pyarrow)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
    except OSError:
        return False
    return (len(header) >= 2 and not first.startswith(_BOM) and b'"' not in first
            and all(h == h.lstrip(" ") for h in header))

