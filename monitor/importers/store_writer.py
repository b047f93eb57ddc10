"""Writing an ImportedRun into a store: atomic, idempotent, resumable for sources that grow.

* Atomic: the run, its rows, its events and the import's bookkeeping go in one transaction
  (`store.atomic()`): a failure leaves the store as it was.
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
from monitor.schema import RunStatus

from .imported_run import ImportedRun

STATE_PREFIX = "import/"
# Rows per write_metrics call: bounds memory per call and paces the progress bar.
WRITE_CHUNK_ROWS = 200_000


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
    state_name = STATE_PREFIX + name
    scalars = run.scalars
    with store.atomic():
        existing = store.get_run(name)
        state = store.load_state(state_name)
        done = 0
        fingerprint = 0
        if existing is not None:
            if state is None:
                if store.count_rows(name):
                    raise GapwatchError(
                        f"run {name!r} already exists in {store.url.redacted()} and was not "
                        "imported: choose another --run name"
                    )
            else:
                if state.get("source") != run.source:
                    raise GapwatchError(
                        f"run {name!r} was imported from {state.get('source')}; importing "
                        f"{run.source} into it would mix two sources: choose another --run name"
                    )
                done = int(state.get("rows", 0))
                if previous_rows is not None:
                    if previous_rows != done:
                        raise GapwatchError(
                            f"run {name!r}: the store holds {done} rows of {run.source} but "
                            f"the follower read from row {previous_rows}: import it again"
                        )
                    done = 0  # run.scalars hold only the new rows
                elif done > len(scalars):
                    raise GapwatchError(
                        f"{run.source}: has {len(scalars)} rows but {done} were imported into "
                        f"run {name!r} before: the source was rewritten; import it under "
                        "another --run name"
                    )
                if done and row_fingerprint(scalars.iloc[:done]) != int(
                        state.get("fingerprint", 0)):
                    raise GapwatchError(
                        f"{run.source}: rows imported into run {name!r} before have changed "
                        "since: import it under another --run name"
                    )
                fingerprint = int(state.get("fingerprint", 0))
        if previous_rows is not None and state is None and previous_rows:
            raise GapwatchError(f"run {name!r}: nothing imported yet to follow on from")
        status = RunStatus.RUNNING if run.live else RunStatus.IMPORTED
        config = dict(run.config)
        if run.summary:
            config.setdefault("summary", run.summary)
        store.ensure_run(
            name, project=project, source=_source_kind(run), config=config,
            tokens_per_step=run.tokens_per_step, status=status,
        )
        _ensure_attempts(store, name, run.attempts)
        new = scalars.iloc[done:]
        total = len(new)
        for lo in range(0, total, WRITE_CHUNK_ROWS):
            # Converted chunk by chunk: a categorical key column becomes strings only here.
            store.write_metrics(name, _store_frame(new.iloc[lo:lo + WRITE_CHUNK_ROWS]))
            if progress is not None:
                progress(min(lo + WRITE_CHUNK_ROWS, total), total)
        if progress is not None and total == 0:
            progress(0, 0)
        events = store.write_events(name, run.events) if run.events else 0
        fingerprint = (fingerprint + row_fingerprint(new)) % (1 << 64)
        rows_total = len(scalars) + (previous_rows or 0)
        last_step = int(scalars["step"].max()) if len(scalars) else (
            (state or {}).get("last_step"))
        store.save_state(state_name, {
            "source": run.source, "rows": rows_total, "fingerprint": fingerprint,
            "profile": run.profile, "last_step": last_step, "updated_at": time.time(),
        })
        if reference_of:
            if store.get_run(reference_of) is None:
                raise GapwatchError(
                    f"--reference-of {reference_of!r}: no such run in {store.url.redacted()}"
                )
            store.update_run(reference_of, reference=name)
    # A source that repeats a (key, step) within one attempt stores it once (the last value wins,
    # as the importer's note says): count what the store gained, not the lines read.
    stored = total - int(new.duplicated(["key", "step", "attempt"]).sum()) if total else 0
    return WriteResult(name, stored, rows_total, events, existing is None)


def import_state(store, name: str) -> dict | None:
    """What earlier imports into run `name` recorded (source, rows, last_step...), or None."""
    return store.load_state(STATE_PREFIX + name)


def _store_frame(scalars: pd.DataFrame) -> pd.DataFrame:
    frame = pd.DataFrame({
        "step": scalars["step"].to_numpy(),
        "key": scalars["key"].astype(str).to_numpy(),
        "value": scalars["value"].to_numpy(),
        "attempt": scalars["attempt"].to_numpy(),
    })
    if "wall_time" in scalars:
        frame["wall_time"] = scalars["wall_time"].to_numpy()
    return frame


def _ensure_attempts(store, name: str, attempts: int) -> None:
    """The runs table counts attempts; an import with restarts has as many as its source."""
    current = int((store.get_run(name) or {}).get("attempts") or 0)
    for _ in range(max(0, attempts - current)):
        store.new_attempt(name)


def _source_kind(run: ImportedRun) -> str:
    return f"import:{run.profile}" if run.profile else "import"
