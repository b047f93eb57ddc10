"""W&B run files (`run-<id>.wandb`) and offline run folders (`wandb/offline-run-*`).

Reads history, config and summary, from the start or, for `--follow`, from where the last read
stopped. Rules:
* Metric names are W&B's (`train/loss`; a nested dict `{"a": {"b": 1}}` becomes `a.b`); names
  starting with `_` are W&B's own (`_step`, `_runtime`, `_timestamp`, `_wandb.*`) and are not
  metrics. `_step` is the step and `_timestamp` the wall time of each row.
* Values that are not numbers (W&B media, histograms, tables, text) are left out and counted in
  the notes; booleans become 1/0; NaN and Infinity are kept as logged values.
* W&B history steps only grow (wandb drops a log to an earlier step), so a row whose `_step` is not
  above the previous row's means a damaged file: an error naming the record.
* The end of the file: a file that stops inside a chunk was cut short: its writer was killed
  mid-write (wandb writes whole chunks, so a live file ends between two, at most inside a record
  split over blocks). Every complete record is imported, the run is marked crashed and a note
  says how many bytes were left unread; a follower instead waits for the rest.
* A file that ends between chunks but has no `exit` record is a run still being written or one
  whose process died between two writes, and the bytes cannot tell which. The file's age can: a
  live wandb process appends to it often (its system-metrics records alone come every few
  seconds), so a file not written for `STALE_AFTER_S` is taken as crashed, a younger one as still
  running (imported as live; `--follow` keeps reading it). The note says which, and the age.
* A run resumed after a crash (`wandb.init(id=..., resume="allow")`) writes one run folder per
  process, each with its own `run-<id>.wandb`. Those files are one run: `find_run_segments` finds
  every folder of the run id beside the one named, and `parse_wandb_run` reads them in the order
  they started, each segment an attempt; where a segment covers steps an earlier one logged (it
  resumed from an earlier checkpoint), its values win, as in the run's own W&B charts.
* The summary is the last value of each summary key, from every summary record in file order
  (W&B's own summary rules: a history row updates it, run.summary[...] sets it); W&B's own keys
  (`_runtime`, `_wandb.*`, ...) are left out.
"""

from __future__ import annotations

import copy
import glob
import json
import mmap
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from monitor.errors import GapwatchError

from . import wire
from ..imported_run import ImportedRun, scalars_frame
from ..input_checks import shown
from ..name_codes import NameCodes
from .log_format import FILE_HEADER, check_file_header, iter_records
from .records import NESTED_SEP, NotText, UnfitValue, decode_exact, to_float
from .step_metric import LoggedItems, StepDeclaration, declared_step

STEP_KEY = "_step"
_RUN_FILE = re.compile(r"run-(.+)\.wandb")
# The run folders wandb makes: run-<date>_<time>-<id> (online), offline-run-<date>_<time>-<id>.
_RUN_FOLDER = re.compile(r"(offline-)?run-\d{8}_\d{6}-.+")
TIMESTAMP_KEY = "_timestamp"
# Records decoded together. The walk over a batch's items reads its bytes once per field
# position, so a batch's bytes (about 3 MB at wandb's ~170 bytes a record) should stay in the CPU
# cache: measured on a 1.41M-step file, 12k-32k records a batch read at the same speed, 60k 25%
# and 250k 40% slower (bench/bench_importers.py's file).
BATCH_RECORDS = 20_000
# Longest text summary value kept (a run name, a status); longer text is not a summary number.
SUMMARY_TEXT_MAX = 200
# A file without an exit record, not written for this long, is a crashed run (module rules).
STALE_AFTER_S = 600.0


def _two_byte(field_number: int) -> int:
    """The wire.record_heads() tag of a length-delimited field numbered 16..2047."""
    tag = (field_number << 3) | 2
    return (tag & 0x7F | 0x80) + 256 * (tag >> 7)


# Record types no importer needs (output 4, files 6, stats 7, artifact 8, tbrecord 9, alert 10,
# telemetry 11, output_raw 13, final 20, footer 22, preempting 23, noop_link_artifact 24,
# use_artifact 25, environment 26, output_logger 27, request 100). History and summary records
# take the fast path; any other (config 5, metric 12, run 17, exit 18, header 21, ...) is decoded
# exactly.
_SKIP_TAGS = np.array(sorted({(n << 3) | 2 for n in (4, 6, 7, 8, 9, 10, 11, 13)} | {
    _two_byte(n) for n in (20, 22, 23, 24, 25, 26, 27, 100)
}))


def find_run_file(path: str | os.PathLike) -> Path:
    """The `.wandb` file of a path that is one, or of an offline run folder holding one."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise GapwatchError(f"{path}: no such file or directory")
    found = sorted(p.glob("*.wandb"))
    if not found:
        found = sorted(q for q in p.glob("*/*.wandb") if not q.parent.is_symlink())
    if not found:
        raise GapwatchError(f"{path}: no .wandb run file in this folder")
    if len(found) > 1:
        names = ", ".join(str(q.relative_to(p)) for q in found[:4])
        raise GapwatchError(f"{path}: holds {len(found)} W&B runs ({names}); name one of them")
    return found[0]


def _wandb_folder(p: Path) -> Path:
    """A project folder whose run folders are in its `wandb/` (where wandb puts them): that."""
    if p.is_dir() and not any(p.glob("*.wandb")) and not any(p.glob("*/*.wandb")) and (
            p / "wandb").is_dir():
        return p / "wandb"
    return p


def is_wandb_source(path: str | os.PathLike) -> bool:
    p = _wandb_folder(Path(path))
    if p.is_file():
        with open(p, "rb") as fh:
            return fh.read(4) == FILE_HEADER[:4]
    return p.is_dir() and (any(p.glob("*.wandb")) or any(p.glob("*/*.wandb")))


@dataclass
class NewRows:
    """Metric rows found by one read: parallel arrays, in file order."""

    step: np.ndarray
    key: np.ndarray  # int32 codes into WandbRunReader.key_names
    value: np.ndarray
    wall_time: np.ndarray

    def __len__(self) -> int:
        return len(self.step)


@dataclass
class WandbRunReader:
    """Reads one `.wandb` file; call `read` again to pick up what was appended since."""

    path: Path
    offset: int = len(FILE_HEADER)
    records: int = 0
    last_step: int | None = None
    rows: int = 0
    names: NameCodes = field(default_factory=NameCodes)
    summary: dict[str, str] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    run_name: str | None = None
    run_id: str | None = None
    project: str | None = None
    finished: bool = False
    exit_code: int | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    exact_records: int = 0
    start_time: float | None = None  # seconds since the epoch, from the run record
    unread: int = 0  # bytes after the last complete record of a file cut short mid-write
    idle_s: float | None = None  # how long the file had not been written when last read whole
    step_declarations: list[StepDeclaration] = field(default_factory=list)  # see step_metric.py
    @property
    def key_names(self) -> list[str]:
        """The history's metric names; a row's `key` is its index here."""
        return self.names.all

    @property
    def source(self) -> str:
        return str(self.path)

    @property
    def crashed(self) -> bool:
        """Cut short mid-write, or without an exit record and not written for STALE_AFTER_S."""
        return bool(self.unread) or (not self.finished and self.idle_s is not None
                                     and self.idle_s >= STALE_AFTER_S)

    def read(self, follow: bool = False, progress=None) -> NewRows:
        """Rows appended since the last read. A record cut off at the end of the file is left
        unread: counted in `unread` (a crashed run), or read again next time by a follower. All
        or nothing: after an error the reader is as it was before the call. progress: called
        with (bytes read, bytes)."""
        failure = None
        before = copy.deepcopy(self.__dict__)
        try:
            with open(self.path, "rb") as fh:
                stat = os.fstat(fh.fileno())
                size = stat.st_size
                self.idle_s = None if follow else max(0.0, time.time() - stat.st_mtime)
                if size == 0:
                    raise GapwatchError(f"{self.path}: empty file (not a W&B run file)")
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                    try:
                        check_file_header(buf[:len(FILE_HEADER)], self.source)
                        return self._read(buf, follow, progress)
                    except GapwatchError as exc:
                        # Raised again outside: the traceback's frames hold views of the map,
                        # which must be gone before it is closed.
                        failure = str(exc)
        except OSError as exc:
            failure = f"{self.path}: cannot read: {exc.strerror}"
        self.__dict__.update(before)
        raise GapwatchError(failure)

    def _read(self, buf, follow: bool, progress) -> NewRows:
        fb = wire.FileBytes(buf)
        parts: list[NewRows] = []
        # The file is checked and decoded a segment at a time; rows come out in file order.
        torn = False
        for found in iter_records(buf, self.source, self.offset, self.records):
            # A record split over blocks whose last chunk is not there yet is how a live file
            # ends; a file that ends inside a chunk was cut short.
            torn = found.torn_at is not None
            joined = _Joined.of(found)
            for lo in range(0, found.count, BATCH_RECORDS):
                hi = min(lo + BATCH_RECORDS, found.count)
                parts.append(self._decode(buf, fb, joined, found, lo, hi))
            self.records += found.count
            self.offset = found.next_offset
            if progress is not None:
                progress(self.offset, len(buf))
        if torn and not follow:
            self.unread = len(buf) - self.offset
        del fb
        if not parts:
            empty = np.zeros(0)
            return NewRows(empty.astype(np.int64), empty.astype(np.int32), empty, empty)
        return NewRows(*(np.concatenate([getattr(p, f) for p in parts])
                         for f in ("step", "key", "value", "wall_time")))

    # --- one batch of records -----------------------------------------------------------------
    def _decode(self, buf, fb, joined: _Joined, found, lo: int, hi: int) -> NewRows:
        """Records lo..hi of a read (record numbers start at self.records + lo): those in the
        file and those split over blocks (joined) through the fast path, the rest exactly."""
        base = self.records + lo
        starts = found.starts[lo:hi]
        stops = found.stops[lo:hi]
        names = NameCodes()
        in_file = np.flatnonzero((starts >= 0) & (stops <= fb.size - wire.TAIL_MARGIN))
        history, updates, exact_idx = self._fast(fb, in_file, starts[in_file], stops[in_file],
                                                 base, names)
        histories = [history]
        j_lo, j_hi = np.searchsorted(joined.index, [lo, hi])
        if j_hi > j_lo:
            history, more, exact_more = self._fast(
                joined.fb, joined.index[j_lo:j_hi] - lo, joined.starts[j_lo:j_hi],
                joined.stops[j_lo:j_hi], base, names)
            histories.append(history)
            updates += more
            exact_idx = np.concatenate([exact_idx, exact_more])
        # The last few records of the data (the fast path reads a little past a record's end).
        near_end = np.flatnonzero((starts >= 0) & (stops > fb.size - wire.TAIL_MARGIN))
        exact_idx = np.unique(np.concatenate([exact_idx, near_end]))
        exact = decode_exact([(base + int(i), found.payload(buf, lo + int(i)))
                              for i in exact_idx], self.source)
        self.exact_records += len(exact_idx)
        self._apply_run_facts(exact)
        if exact.history:
            e_rec, e_name, e_value = zip(*exact.history)
            e_recs = np.asarray(e_rec, dtype=np.int64) - base
            nums, skipped = self._numbers(pa.array(e_value, type=pa.large_string()),
                                          lambda i: base + int(e_recs[i]))
            histories.append((e_recs, names.codes(e_name), nums, skipped))
        recs, codes, nums, skipped = _merged(histories)
        rows = self._rows(recs, codes, names.all, nums, skipped, base)

        # Summary: the last update of each name of each source (only those values are read),
        # applied in record order (a later record's update or removal wins, as in W&B).
        updates += [u for u in exact.summary if not u[1].startswith("_")]
        updates.sort(key=lambda t: t[0])
        for _, name, value in updates:
            if value is None:
                self.summary.pop(name, None)
            else:
                self.summary[name] = value
        return rows

    def _fast(self, fb, local: np.ndarray, starts: np.ndarray, stops: np.ndarray, base: int,
              names: NameCodes):
        """The records `local` (indices in the batch) at [starts, stops) of fb, through the fast
        path: (history items (record, name code, value, skipped) in record order, summary
        updates, the records to decode exactly)."""
        tags, fields = wire.record_heads(fb, starts)
        fast = np.flatnonzero((tags == wire.HISTORY_TAG) | (tags == wire.SUMMARY_TAG))
        items = wire.read_items(fb, stops[fast], fields[fast], tags[fast])
        other = np.flatnonzero((tags != wire.HISTORY_TAG) & (tags != wire.SUMMARY_TAG))
        exact_idx = np.concatenate([
            local[fast[items.bad]],
            local[other[~np.isin(tags[other], _SKIP_TAGS)]],
        ])
        recs = local[fast[items.record]]
        history = tags[fast[items.record]] == wire.HISTORY_TAG
        # One dictionary of names for the history and summary items.
        encoded = wire.gather_strings(fb, items.name_start, items.name_len).dictionary_encode()
        local_codes = encoded.indices.to_numpy(zero_copy_only=False)
        codes = names.codes(self._texts(
            encoded.dictionary, lambda i: base + int(recs[np.argmax(local_codes == i)])))
        codes = codes[local_codes]

        h = np.flatnonzero(history)
        recs_h = recs[h]
        values = wire.gather_strings(fb, items.value_start[h], items.value_len[h])
        nums, skipped = self._numbers(values, lambda i: base + int(recs_h[i]))
        s = np.flatnonzero(~history)
        updates = self._last_updates(fb, recs[s] + base, codes[s], names.all,
                                     items.name_start[s], items.value_start[s],
                                     items.value_len[s])
        return (recs_h, codes[h], nums, skipped), updates, exact_idx

    def _last_updates(self, fb, recs, codes, dictionary, name_start, value_start,
                      value_len) -> list[tuple[int, str, str]]:
        """(record, name, json) of the last update of each name among summary items in file
        order; only those values are read."""
        if len(codes) == 0:
            return []
        last_at = np.full(len(dictionary), -1, dtype=np.int64)
        np.maximum.at(last_at, codes, name_start)
        # Item offsets grow in file order, so each name's last offset finds its item.
        last = np.searchsorted(name_start, last_at[last_at >= 0])
        texts = self._texts(wire.gather_strings(fb, value_start[last],
                                                value_len[last]),
                            lambda i: int(recs[last[i]]))
        return [(int(recs[i]), dictionary[codes[i]], t) for i, t in zip(last.tolist(), texts)]

    def _texts(self, strings: pa.Array, record_of) -> list[str]:
        """The strings as text; protobuf rejects a record whose text is not UTF-8, and so does
        this, naming the record (record_of(i): the record number of string i)."""
        out = []
        for i, raw in enumerate(strings.view(pa.binary_view()).to_pylist()):
            try:
                out.append(raw.decode())
            except UnicodeDecodeError:
                raise GapwatchError(
                    f"{self.path}: record {record_of(i) + 1}: not a W&B record (text that is "
                    "not UTF-8)"
                ) from None
        return out

    def _numbers(self, values: pa.Array, record_of) -> tuple[np.ndarray, np.ndarray]:
        try:
            return to_float(values)
        except NotText as exc:
            raise GapwatchError(
                f"{self.path}: record {record_of(exc.index) + 1}: not a W&B record (text that "
                "is not UTF-8)"
            ) from None
        except UnfitValue as exc:
            raise GapwatchError(f"{self.path}: record {record_of(exc.index) + 1}: the number "
                                f"{shown(exc.text)} does not fit a 64-bit float") from None

    def _rows(self, recs: np.ndarray, codes: np.ndarray, dictionary: list[str],
              nums: np.ndarray, skipped: np.ndarray, base: int) -> NewRows:
        """Metric rows of the history items (record, name code, value), in record order."""
        if len(recs) == 0:
            empty = np.zeros(0)
            return NewRows(empty.astype(np.int64), empty.astype(np.int32), empty, empty)
        starts_row = np.empty(len(recs), dtype=bool)
        starts_row[0] = True
        np.not_equal(recs[1:], recs[:-1], out=starts_row[1:])
        row_recs = recs[starts_row]
        row_of_item = np.cumsum(starts_row) - 1

        local = {name: i for i, name in enumerate(dictionary)}
        is_step = codes == local.get(STEP_KEY, -1)
        per_row = np.bincount(row_of_item[is_step], minlength=len(row_recs))
        if (per_row != 1).any():
            bad = int(np.flatnonzero(per_row != 1)[0])
            raise GapwatchError(
                f"{self.path}: record {base + int(row_recs[bad]) + 1}: history row "
                f"with {'no' if per_row[bad] == 0 else 'more than one'} _step"
            )
        step_f = np.empty(len(row_recs))
        step_f[row_of_item[is_step]] = nums[is_step]
        # 2.0**63 and above wrap around to negative steps in int64.
        broken = (~np.isfinite(step_f) | (step_f != np.round(step_f)) | (step_f < 0)
                  | (step_f >= 2.0**63))
        if broken.any():
            bad = int(np.flatnonzero(broken)[0])
            raise GapwatchError(
                f"{self.path}: record {base + int(row_recs[bad]) + 1}: _step "
                f"{float(step_f[bad])!r} is not a whole number from 0 to 2**63 - 1"
            )
        row_step = step_f.astype(np.int64)
        previous = np.concatenate(([self.last_step if self.last_step is not None else -1],
                                   row_step[:-1]))
        back = np.flatnonzero(row_step <= previous)
        if len(back):
            i = int(back[0])
            raise GapwatchError(
                f"{self.path}: record {base + int(row_recs[i]) + 1}: step {row_step[i]} "
                f"after step {previous[i]}: W&B steps only grow, so the file is damaged"
            )
        self.last_step = int(row_step[-1])
        self.rows += len(row_recs)
        row_time = np.full(len(row_recs), np.nan)
        is_time = codes == local.get(TIMESTAMP_KEY, -1)
        row_time[row_of_item[is_time]] = nums[is_time]

        internal = np.array([name.startswith("_") for name in dictionary], dtype=bool)
        metric = ~internal[codes] & ~_given_again(starts_row, codes, len(dictionary))
        keep = metric & ~skipped
        if skipped.any():
            for c, k in zip(*np.unique(codes[skipped & metric], return_counts=True)):
                self.skipped[dictionary[c]] = self.skipped.get(dictionary[c], 0) + int(k)
        # Names of this batch's history rows only (the dictionary also holds summary names).
        in_history = np.bincount(codes, minlength=len(dictionary)) > 0
        to_global = np.array([self.names.code(name) if used else -1
                              for name, used in zip(dictionary, in_history)], dtype=np.int32)
        return NewRows(
            step=row_step[row_of_item[keep]],
            key=to_global[codes[keep]],
            value=nums[keep],
            wall_time=row_time[row_of_item[keep]],
        )

    def _apply_run_facts(self, exact) -> None:
        for run in exact.runs:
            if run.HasField("start_time") and self.start_time is None:
                self.start_time = run.start_time.seconds + run.start_time.nanos * 1e-9
            self.run_name = run.display_name or self.run_name
            self.run_id = run.run_id or self.run_id
            self.project = run.project or self.project
        self.step_declarations += exact.step_declarations
        for parts, value in exact.config_updates:
            if parts and parts[0].startswith("_"):
                continue
            _set_nested(self.config, parts, value)
        for parts in exact.config_removes:
            _del_nested(self.config, parts)
        if exact.finished:
            self.finished = True
            self.exit_code = exact.exit_code

    # --- results --------------------------------------------------------------------------------
    def public_summary(self) -> dict:
        """Final summary values that are numbers, booleans or short text (W&B media, histograms
        and tables stay in W&B)."""
        out = {}
        for name, text in self.summary.items():
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, (int, float, bool)) or (
                    isinstance(value, str) and len(value) <= SUMMARY_TEXT_MAX):
                out[name] = value
        return out

    def notes(self) -> list[str]:
        notes = []
        if self.skipped:
            listed = ", ".join(f"{k} ({n})" for k, n in sorted(self.skipped.items())[:6])
            notes.append(f"{self.path}: left out values that are not numbers: {listed}")
        if self.unread:
            notes.append(f"{self.path}: crashed: the file stops inside a record; imported its "
                         f"{self.records:,} complete records, {self.unread:,} bytes left unread")
        elif self.crashed:
            notes.append(f"{self.path}: crashed: no exit record and not written for "
                         f"{_age(self.idle_s)} (a run still going writes every few seconds); "
                         f"imported its {self.records:,} complete records")
        elif not self.finished:
            written = "" if self.idle_s is None else f", written {_age(self.idle_s)} ago"
            notes.append(f"{self.path}: no exit record{written}: taken as still running (a "
                         f"file not written for {_age(STALE_AFTER_S)} is taken as crashed); "
                         "imported what is there")
        elif self.exit_code:
            notes.append(f"{self.path}: the run exited with code {self.exit_code}")
        return notes


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def run_id_of(file: Path) -> str | None:
    """The run id in a `run-<id>.wandb` file name (wandb names every run file so)."""
    m = _RUN_FILE.fullmatch(file.name)
    return m.group(1) if m else None


def logical_runs(folder: str | os.PathLike) -> dict[str, list[Path]]:
    """The `.wandb` files under a `wandb/` folder (or a run folder), grouped by run id."""
    p = Path(folder)
    files = sorted(p.glob("*.wandb")) or sorted(
        q for q in p.glob("*/*.wandb") if not q.parent.is_symlink())
    out: dict[str, list[Path]] = {}
    for f in files:
        out.setdefault(run_id_of(f) or str(f), []).append(f)
    return out


def find_run_segments(path: str | os.PathLike) -> list[Path]:
    """Every `.wandb` file of the run a path names: a `.wandb` file or run folder, with the
    folders beside it that hold the same run id (a resumed run), or a `wandb/` folder (or the
    project folder holding it) with one run in one or several folders. A folder of several runs
    is an error listing them."""
    if not Path(path).exists():
        raise GapwatchError(f"{path}: no such file or directory")
    p = _wandb_folder(Path(path))
    if p.is_dir() and not any(p.glob("*.wandb")):
        runs = logical_runs(p)
        if not runs:
            raise GapwatchError(f"{path}: no .wandb run file in this folder")
        if len(runs) > 1:
            offered = "; ".join(
                f"{rid} ({len(fs)} folder{'s' if len(fs) > 1 else ''}): {fs[-1].parent}"
                for rid, fs in list(runs.items())[:6])
            raise GapwatchError(f"{path}: holds {len(runs)} W&B runs; import each by one of its "
                                f"folders (a resumed run's folders come together): {offered}")
        return next(iter(runs.values()))
    file = find_run_file(p)
    rid = run_id_of(file)
    if rid is None or not _RUN_FOLDER.fullmatch(file.parent.name) or not (
            file.parent.name.endswith(f"-{rid}")):
        return [file]  # not in a folder wandb named: no siblings to look for
    beside = sorted(q for q in file.parent.parent.glob(f"*-{glob.escape(rid)}/run-{glob.escape(rid)}.wandb")
                    if _RUN_FOLDER.fullmatch(q.parent.name) and not q.parent.is_symlink())
    return beside if file in beside else [file]


def parse_wandb_run(path: str | os.PathLike, progress=None) -> ImportedRun:
    """A whole `.wandb` file (or offline run folder) as an ImportedRun with W&B's metric names;
    a resumed run's segments (see the module rules) as one run, one attempt per segment."""
    files = find_run_segments(path)
    readers, parts = [], []
    for i, file in enumerate(files):
        reader = WandbRunReader(file)
        rows = reader.read(progress=progress if i == len(files) - 1 else None)
        readers.append(reader)
        parts.append(rows)
    order = sorted(range(len(files)), key=lambda i: (
        readers[i].start_time if readers[i].start_time is not None else float("inf"), i))
    readers = [readers[i] for i in order]
    parts = [parts[i] for i in order]
    if not sum(len(rows) for rows in parts):
        # Following a run that has just started may see this; a one-shot import has nothing to do.
        raise GapwatchError(f"{readers[-1].path}: no logged metrics in this W&B run file (only "
                            "its header and settings): nothing to import")
    if len(readers) == 1:
        return to_imported(readers[0], parts[0])
    runs = [to_imported(r, rows, attempt=n + 1) for n, (r, rows) in enumerate(zip(readers, parts))]
    last = runs[-1]
    last.scalars = pd.concat([r.scalars for r in runs], ignore_index=True)
    last.notes = [n for r in runs for n in r.notes if "no exit record" not in n or r is last]
    last.notes.append(f"resumed run {readers[-1].run_id}: {len(runs)} segments, read in the "
                      "order they started, each an attempt: "
                      + ", ".join(str(r.path.parent.name) for r in readers))
    last.source = str(readers[0].path)
    return last


def to_imported(reader: WandbRunReader, rows: NewRows, attempt: int = 1) -> ImportedRun:
    keys = pd_categorical(rows.key, reader.key_names)
    step_key, step_notes = declared_step(reader.step_declarations,
                                         LoggedItems(reader.key_names, rows.step, rows.key, rows.value))
    run = ImportedRun(
        name_hint=reader.run_name or reader.run_id or reader.path.stem,
        scalars=scalars_frame(rows.step, keys, rows.value,
                              np.full(len(rows.step), attempt, dtype=np.int64),
                              wall_time=rows.wall_time),
        config=dict(reader.config),
        summary=reader.public_summary(),
        source=str(reader.path),
        notes=reader.notes() + step_notes,
        live=not reader.finished and not reader.crashed,
        crashed=reader.crashed,
        step_key=step_key,
    )
    return run


@dataclass
class _Joined:
    """The records of a read that are split over blocks, joined back to back in one buffer (zero
    bytes after them, for the fast path's reads past a record's end)."""

    index: np.ndarray  # the records' indices in the read, ascending
    starts: np.ndarray
    stops: np.ndarray
    fb: wire.FileBytes | None

    @classmethod
    def of(cls, found) -> _Joined:
        index = np.array(sorted(found.split), dtype=np.int64)
        sizes = np.array([len(found.split[i]) for i in index.tolist()], dtype=np.int64)
        stops = np.cumsum(sizes)
        data = b"".join(found.split[i] for i in index.tolist()) + bytes(wire.TAIL_MARGIN)
        return cls(index, stops - sizes, stops, wire.FileBytes(data) if len(index) else None)


def _given_again(starts_row: np.ndarray, codes: np.ndarray, n_names: int) -> np.ndarray:
    """Items whose name comes again later in the same history row (rows are runs of items, each
    starting where starts_row is True; codes < n_names). A row is a dict: a name given twice in
    one record (a dotted key and a nested dict that flatten alike) keeps its last value, as
    wandb's row does. Each row's names are set as bits (64 names a word): a row with fewer bits
    set than items repeats a name, and only such rows are looked at item by item."""
    out = np.zeros(len(codes), dtype=bool)
    if len(codes) == 0:
        return out
    starts = np.flatnonzero(starts_row)
    sizes = np.diff(np.append(starts, len(codes)))
    bits = np.left_shift(np.uint64(1), (codes & 63).astype(np.uint64))
    if n_names <= 64:
        names_set = np.bitwise_count(np.bitwise_or.reduceat(bits, starts))
    else:
        words = np.zeros((len(starts), (n_names + 63) // 64), dtype=np.uint64)
        np.bitwise_or.at(words, (np.cumsum(starts_row) - 1, codes >> 6), bits)
        names_set = np.bitwise_count(words).sum(axis=1)
    for row in np.flatnonzero(names_set < sizes).tolist():
        seen: set[int] = set()
        for i in range(starts[row] + sizes[row] - 1, starts[row] - 1, -1):
            out[i] = int(codes[i]) in seen
            seen.add(int(codes[i]))
    return out


def _merged(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """History items of several sources, each in record order and holding other records than
    the rest, merged in record order: the few items of the others are inserted into the first."""
    main, others = parts[0], [p for p in parts[1:] if len(p[0])]
    if not others:
        return main
    rest = [np.concatenate(col) for col in zip(*others)]
    order = np.argsort(rest[0], kind="stable")
    rest = [col[order] for col in rest]
    at = np.searchsorted(main[0], rest[0])
    return tuple(np.insert(m, at, r) for m, r in zip(main, rest))


def pd_categorical(codes: np.ndarray, names: list[str]):
    return pd.Categorical.from_codes(codes.astype(np.int32), categories=pd.Index(names, dtype=str)) \
        if len(names) else pd.Categorical([], categories=pd.Index([], dtype=str))


def _set_nested(target: dict, parts: tuple[str, ...], value) -> None:
    for part in parts[:-1]:
        nxt = target.get(part)
        if not isinstance(nxt, dict):
            nxt = target[part] = {}
        target = nxt
    target[parts[-1]] = value


def _del_nested(target: dict, parts: tuple[str, ...]) -> None:
    for part in parts[:-1]:
        target = target.get(part)
        if not isinstance(target, dict):
            return
    target.pop(parts[-1], None)


__all__ = ["WandbRunReader", "parse_wandb_run", "find_run_file", "find_run_segments",
           "logical_runs", "is_wandb_source", "NESTED_SEP"]
