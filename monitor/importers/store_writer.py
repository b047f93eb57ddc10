"""Writing an ImportedRun into a store: atomic, idempotent, resumable for sources that grow.

* Atomic: the run, its rows, its events and the import's bookkeeping go in one transaction
  (`store.atomic()`): a failure leaves the store as it was. A streamed source (`ImportWriter`)
  is written chunk by chunk inside that one transaction, so a bad line half-way through the file
  leaves the store as it was too.
* Idempotent: the store keys rows by (run, key, step, attempt) and ignores a row it has. On top of
  that the import remembers how many of the source's rows it took, with a fingerprint of them, so
  importing the same source again writes nothing, and importing a source that grew (a live W&B
  run, a log still being appended) writes only the new rows.
* A source whose already-imported rows changed (a different file under the same run name, a
  rewritten log) is refused with an error instead of being mixed in: the store keeps the first
  value of a (key, step, attempt), so a silent re-import could not apply the change anyway.
* A run that exists but was not made by an import (a live run logging through monitor.client) is
  refused too: an import never writes into a run it did not create.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.errors import GapwatchError
from monitor.schema import UNKNOWN_WALL_TIME, RunStatus

from .imported_run import ImportedRun

STATE_PREFIX = "import/"
# Rows per write_metrics call: bounds memory per call and paces the progress bar.
WRITE_CHUNK_ROWS = 200_000
# Rows of an incomplete chunk of steps an import may hold back for the next write (a few tens of
# MB): a wider run's incomplete chunk is written at once, and sealed by the next write.
HELD_ROWS = 1_000_000
_NO_ROWS = pd.DataFrame({"step": np.empty(0, np.int64)})


@dataclass
class WriteResult:
    run: str
    rows_new: int
    """Rows the store gained (a repeated key and step counts once)."""
    rows_total: int
    events: int
    created: bool


def row_fingerprint(scalars: pd.DataFrame) -> int:
    """An order-independent 64-bit sum of per-row hashes of (step, key, value, attempt), so the
    fingerprint of a prefix can be extended by the rows appended after it."""
    if not len(scalars):
        return 0
    codes, names = pd.factorize(scalars["key"])
    # Each distinct name hashed once (millions of rows share a few names).
    name_hash = pd.util.hash_array(np.asarray([str(n) for n in names], dtype=object))
    with np.errstate(over="ignore"):
        row = (name_hash[codes] * np.uint64(0x9E3779B97F4A7C15)
               + pd.util.hash_array(scalars["step"].to_numpy()) * np.uint64(0xC2B2AE3D27D4EB4F)
               + pd.util.hash_array(scalars["value"].to_numpy())
               + pd.util.hash_array(scalars["attempt"].to_numpy()) * np.uint64(0x165667B19E3779F9))
    return int(np.sum(row, dtype=np.uint64))


def write_run(store, name: str, run: ImportedRun, *, project: str | None = None,
              reference_of: str | None = None, progress=None,
              previous_rows: int | None = None) -> WriteResult:
    """Put `run` into `store` as run `name` (see module docstring for the rules).

    reference_of: a run already in the store whose reference this one becomes.
    progress: called with (rows_written, rows_to_write) as chunks go in.
    previous_rows: set by followers that read only what a source appended: run.scalars are the
        source's rows from this index on, and the store must hold exactly the rows before.
    """
    config = dict(run.config)
    if run.summary:
        config.setdefault("summary", run.summary)
    with store.atomic():
        writer = ImportWriter(store, name, run.source, live=run.live, previous_rows=previous_rows,
                              crashed=run.crashed)
        writer.start(project=project, profile=run.profile, config=config,
                     tokens_per_step=run.tokens_per_step)
        writer.add(run.scalars, progress=progress, last=True)
        return writer.finish(events=run.events, reference_of=reference_of)


class ImportWriter:
    """One import into run `name`, fed the source's mapped rows in order, chunk by chunk, inside
    the caller's `store.atomic()` block: `start`, `add` for each chunk, `finish`.

    The rows an earlier import took are recognised by their count and fingerprint as they stream
    past (the fingerprint is a sum, so it runs along), and only the rows after them are written.
    """

    def __init__(self, store, name: str, source: str, *, live: bool = False,
                 previous_rows: int | None = None, crashed: bool = False) -> None:
        self.store, self.name, self.source, self.live = store, name, source, live
        self.crashed = crashed
        self.previous_rows = previous_rows
        self.existing = store.get_run(name)
        self.state = store.load_state(STATE_PREFIX + name)
        self.done = 0  # source rows the store holds already
        self.fingerprint = 0
        state = self.state
        if self.existing is not None:
            if state is None:
                if store.count_rows(name):
                    raise GapwatchError(
                        f"run {name!r} already exists in {store.url.redacted()} and was not "
                        "imported: choose another --run name"
                    )
            else:
                if state.get("source") != source:
                    raise GapwatchError(
                        f"run {name!r} was imported from {state.get('source')}; importing "
                        f"{source} into it would mix two sources: choose another --run name"
                    )
                self.done = int(state.get("rows", 0))
                if previous_rows is not None:
                    if previous_rows != self.done:
                        raise GapwatchError(
                            f"run {name!r}: the store holds {self.done} rows of {source} but "
                            f"the follower read from row {previous_rows}: import it again"
                        )
                    self.done = 0  # the rows added hold only the new rows
                self.fingerprint = int(state.get("fingerprint", 0))
        if previous_rows is not None and state is None and previous_rows:
            raise GapwatchError(f"run {name!r}: nothing imported yet to follow on from")
        self.profile: str | None = None
        self._seen = 0
        self._prefix = 0
        self._stored = 0
        self._attempts = 0
        self._last_step: int | None = None
        self._held: pd.DataFrame | None = None  # rows of a chunk of steps not yet complete

    def start(self, *, project: str | None, profile: str | None, config: dict,
              tokens_per_step: float | None) -> None:
        self.profile = profile
        status = (RunStatus.CRASHED if self.crashed else
                  RunStatus.RUNNING if self.live else RunStatus.IMPORTED)
        self.store.ensure_run(
            self.name, project=project, source=f"import:{profile}" if profile else "import",
            config=config, tokens_per_step=tokens_per_step, status=status,
        )

    def add(self, scalars: pd.DataFrame, progress=None, last: bool = False) -> None:
        """The source's next rows; progress: called with (rows_written, rows_to_write) of these.
        last: no rows follow (else the rows of a chunk of steps not yet complete may wait for
        the next call, and `finish` writes what still waits)."""
        n = len(scalars)
        skip = min(max(self.done - self._seen, 0), n)
        if skip:
            self._prefix = (self._prefix + row_fingerprint(scalars.iloc[:skip])) % (1 << 64)
        self._seen += n
        if skip and self._seen >= self.done and self._prefix != self.fingerprint:
            raise GapwatchError(
                f"{self.source}: rows imported into run {self.name!r} before have changed "
                "since: import it under another --run name"
            )
        if n:
            self._ensure_attempts(int(scalars["attempt"].max()))
            top = int(scalars["step"].max())
            self._last_step = top if self._last_step is None else max(self._last_step, top)
        new = scalars.iloc[skip:]
        total = len(new)
        self._write(new, last, progress)
        if progress is not None and total == 0:
            progress(0, 0)
        self.fingerprint = (self.fingerprint + row_fingerprint(new)) % (1 << 64)

    def finish(self, *, events: list[dict], reference_of: str | None = None,
               tokens_per_step: float | None = None) -> WriteResult:
        """Events, the import's bookkeeping and the reference link, once every row was added.
        tokens_per_step: known only now (a streamed source), or None to leave it as it is."""
        self._write(_NO_ROWS, last=True)
        if self.previous_rows is None and self.done > self._seen:
            raise GapwatchError(
                f"{self.source}: has {self._seen} rows but {self.done} were imported into "
                f"run {self.name!r} before: the source was rewritten; import it under "
                "another --run name"
            )
        store, name = self.store, self.name
        self._ensure_attempts(1)
        if tokens_per_step is not None:
            store.update_run(name, tokens_per_step=tokens_per_step)
        written = store.write_events(name, events) if events else 0
        rows_total = self._seen + (self.previous_rows or 0)
        last_step = self._last_step if self._last_step is not None else (
            (self.state or {}).get("last_step"))
        store.save_state(STATE_PREFIX + name, {
            "source": self.source, "rows": rows_total, "fingerprint": self.fingerprint,
            "profile": self.profile, "last_step": last_step, "updated_at": time.time(),
        })
        if reference_of:
            if store.get_run(reference_of) is None:
                raise GapwatchError(
                    f"--reference-of {reference_of!r}: no such run in {store.url.redacted()}"
                )
            store.update_run(reference_of, reference=name)
        return WriteResult(name, self._stored, rows_total, written, self.existing is None)
    def _write(self, rows: pd.DataFrame, last: bool, progress=None) -> None:
        """Write rows, in slices that end at the last step of one of the store's chunks, so that
        the store seals them straight into chunks instead of storing rows it moves into a chunk
        on the next write; unless `last`, the rows of the chunk not yet complete wait."""
        if self._held is not None:
            rows = _joined(self._held, rows) if len(rows) else self._held
            self._held = None
        total = len(rows)
        if not total:
            return
        width = self.store.chunk_steps
        steps = rows["step"].to_numpy()
        ordered = bool(np.all(steps[1:] >= steps[:-1]))  # not so across a rewind
        if ordered and not last:
            keep = int(np.searchsorted(steps, width * (int(steps[-1]) // width)))
            if total - keep <= HELD_ROWS:
                rows, self._held, total = rows.iloc[:keep], rows.iloc[keep:], keep
        lo = 0
        while lo < total:
            hi = min(lo + WRITE_CHUNK_ROWS, total)
            if ordered and hi < total:
                edge = int(np.searchsorted(steps, width * (int(steps[hi - 1]) // width)))
                hi = edge if edge > lo else hi
            # Slices of a whole run: a categorical key column becomes strings a slice at a time.
            # A source that repeats a (key, step) within one attempt stores it once (the last
            # value wins, as the importer's note says): what counts is what the store took.
            self._stored += self.store.write_metrics(self.name, _store_frame(rows.iloc[lo:hi], self.live))
            lo = hi
            if progress is not None:
                progress(hi, total)

    def _ensure_attempts(self, attempts: int) -> None:
        """The runs table counts attempts; an import with restarts has as many as its source."""
        if attempts <= self._attempts:
            return
        current = int((self.store.get_run(self.name) or {}).get("attempts") or 0)
        for _ in range(max(0, attempts - current)):
            self.store.new_attempt(self.name)
        self._attempts = attempts


def import_state(store, name: str) -> dict | None:
    """What earlier imports into run `name` recorded (source, rows, last_step...), or None."""
    return store.load_state(STATE_PREFIX + name)


def _joined(first: pd.DataFrame, then: pd.DataFrame) -> pd.DataFrame:
    """Two frames of rows, one after the other; categorical keys stay categorical (pd.concat
    would make strings of them when their categories differ)."""
    a, b = first["key"], then["key"]
    if isinstance(a.dtype, pd.CategoricalDtype) and isinstance(b.dtype, pd.CategoricalDtype):
        names = b.cat.categories.union(a.cat.categories, sort=False)
        first = first.assign(key=a.cat.set_categories(names))
        then = then.assign(key=b.cat.set_categories(names))
    return pd.concat([first, then], ignore_index=True)


def _store_frame(scalars: pd.DataFrame, live: bool) -> pd.DataFrame:
    """The columns the store takes, sharing the rows' arrays (the store only reads them). A row
    the source logged no time for is stored at UNKNOWN_WALL_TIME, unless the source is live: then
    the store's stamp (now) is when it arrived, close to when it was logged."""
    columns = {
        "step": scalars["step"].to_numpy(),
        "key": scalars["key"],  # a categorical stays one: the store makes strings of it once
        "value": scalars["value"].to_numpy(),
        "attempt": scalars["attempt"].to_numpy(),
    }
    if "wall_time" in scalars:
        walls = scalars["wall_time"].to_numpy()
        columns["wall_time"] = walls if live else np.where(np.isnan(walls), UNKNOWN_WALL_TIME, walls)
    elif not live:
        columns["wall_time"] = np.full(len(scalars), UNKNOWN_WALL_TIME)
    return pd.DataFrame(columns, copy=False)
