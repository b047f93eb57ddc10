"""The store: runs, metrics, events, detections and service state behind one object.

`open_store(url)` picks the backend from the URL (see database.py), brings the schema up to date and
returns a `Store`. Every write is idempotent; `with store.atomic():` groups writes into one
transaction (all or nothing), which importers use. The SQL lives in the modules this one composes
(reader, metric_rows, metrics_writer, increments, alert_rows); callers outside the package only
ever call a `Store`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection, and_, delete, select
from sqlalchemy.exc import DBAPIError, OperationalError

from monitor.errors import GapwatchError
from monitor.jsonutil import dumps
from monitor.schema import Detection, MetricRows, RunData, RunInfo, RunStatus, SeriesMark, Severity, is_valid_key
from monitor.store import (
    chunks,
    derived,
    increments,
    metric_rows,
    metrics_writer,
    migrations,
    reader,
    tables,
    tail_cache,
)
from monitor.store.alert_rows import AlertRows, OutboxRows
from monitor.store.database import Database, StoreURL, engine_for, resolve
from monitor.store.errors import describe_db_error
from monitor.store.increments import KeyRange, RunMarks
from monitor.store.leases import LeaseRows
from monitor.store.run_frames import KeyRows


def open_store(url: str | None = None, read_only: bool = False, create: bool = True,
               statement_timeout_s: float | None = None) -> "Store":
    """Open (and, unless read-only, upgrade) the store at `url`; a store that does not exist yet is
    created only for writing with `create` (a command that changes existing runs passes False, so
    a mistyped path is an error, not a new empty store). `statement_timeout_s` bounds each
    statement (see database.engine_for); None keeps the backend's defaults."""
    store_url = resolve(url)
    path = store_url.sqlite_path
    if not read_only and not create and path is not None and not path.exists():
        raise GapwatchError(f"no gapwatch store at {path}")
    engine = tail_cache.forgotten_on_rollback(engine_for(store_url, read_only=read_only,
                                                         statement_timeout_s=statement_timeout_s))
    try:
        with engine.begin() as conn:
            if read_only:
                _check_readable_version(conn, store_url)
            else:
                if not create and migrations.current_version(conn) == 0:
                    raise GapwatchError(f"{store_url.redacted()} holds no gapwatch store yet")
                migrations.upgrade(conn)
    except (OperationalError, DBAPIError) as exc:
        engine.dispose()
        raise GapwatchError(f"cannot open store {store_url.redacted()}: {describe_db_error(exc)}") from None
    except GapwatchError:
        engine.dispose()
        raise
    return Store(store_url, engine, read_only)


def _check_readable_version(conn: Connection, store_url: StoreURL) -> None:
    version = migrations.current_version(conn)
    if version == 0:
        raise GapwatchError(f"{store_url.redacted()} holds no gapwatch store yet")
    if version != migrations.SCHEMA_VERSION:
        raise GapwatchError(
            f"{store_url.redacted()} has schema version {version} and this gapwatch reads "
            f"{migrations.SCHEMA_VERSION}; open it once for writing with the newer of the two"
        )


class Store:
    def __init__(self, url: StoreURL, engine, read_only: bool) -> None:
        self.url = url
        self.engine = engine
        self.read_only = read_only
        self._db = Database(url, engine)
        self.alerts = AlertRows(self._db)
        """The alerts table (the alert ledger's)."""
        self.outbox = OutboxRows(self._db)
        """Notifications to deliver (the delivery loop's)."""
        self.leases = LeaseRows(self._db)
        """Which watch worker judges which run (several `gapwatch watch` sharing a store)."""

    # --- connections and transactions -----------------------------------------------------------
    @property
    def backend(self) -> str:
        """The backend the store runs on.

        Returns:
            "sqlite" or "postgresql".
        """
        return self.url.backend

    def close(self) -> None:
        """Release the store's connections. Idempotent; a store used as a context manager closes
        itself.
        """
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def atomic(self) -> Iterator[Connection]:
        """Every store call inside the block, on this thread, is one transaction.

        Returns:
            A context manager yielding the open connection; leaving the block commits, an
            exception rolls everything in it back.
        """
        with self._db.atomic() as conn:
            yield conn

    def schema_version(self) -> int:
        """The schema version the database holds, read on a plain connection: a health probe on
        SQLite must not queue behind a writer for a transaction.

        Returns:
            The version (monitor/store/migrations.py), 0 for an empty database.
        """
        with self.engine.connect() as conn:
            return migrations.current_version(conn)

    # --- runs ----------------------------------------------------------------------------------
    def ensure_run(
        self,
        name: str,
        *,
        project: str | None = None,
        source: str = "gapwatch",
        config: dict | None = None,
        tokens_per_step: float | None = None,
        reference: str | None = None,
        status: str | RunStatus = RunStatus.RUNNING,
    ) -> int:
        """Create the run if it is new; an existing run keeps its fields except those given here.

        Args:
            name: the run's name, 1 to 255 characters, not blank.
            project, source, config, tokens_per_step, reference, status: the run's fields; None
                leaves an existing run's value as it is.

        Returns:
            The run's id.

        Raises:
            GapwatchError: the name is empty, blank or too long.
        """
        if not name or len(name) > 255:
            raise GapwatchError(f"run name {name!r} must be 1 to 255 characters")
        if not name.strip():
            raise GapwatchError(f"run name {name!r} is blank: give a name with a visible character")
        now = time.time()
        with self._db.tx() as conn:
            existing = conn.execute(select(tables.runs).where(tables.runs.c.name == name)).mappings().first()
            if existing is None:
                self._db.upsert(
                    conn,
                    tables.runs,
                    [{
                        "name": name, "project": project, "source": source, "config": dumps(config or {}),
                        "tokens_per_step": tokens_per_step, "reference": reference,
                        "status": RunStatus(status).value, "attempts": 0,
                        "created_at": now, "updated_at": now,
                    }],
                    index=["name"],
                    update=[],
                )
            else:
                self._update(conn, name, project=project, config=config, tokens_per_step=tokens_per_step,
                             reference=reference, status=status)
            run_id = conn.execute(select(tables.runs.c.id).where(tables.runs.c.name == name)).scalar_one()
        self._db.remember_run(name, run_id)
        return run_id

    def update_run(self, name: str, **fields: Any) -> None:
        """Change some fields of an existing run.

        Args:
            name: the run.
            **fields: project, config, tokens_per_step, reference, status or source; a None value
                leaves that field as it is.

        Raises:
            GapwatchError: there is no such run.
            TypeError: a field the runs table does not have.
        """
        with self._db.tx() as conn:
            self._db.run_id(conn, name)
            self._update(conn, name, **fields)

    def _update(self, conn: Connection, name: str, **fields: Any) -> None:
        values = {k: v for k, v in fields.items() if v is not None}
        if "config" in values:
            values["config"] = dumps(values["config"])
        if "status" in values:
            values["status"] = RunStatus(values["status"]).value
        unknown = set(values) - {"project", "config", "tokens_per_step", "reference", "status", "source"}
        if unknown:
            raise TypeError(f"update_run got unknown fields {sorted(unknown)}")
        values["updated_at"] = time.time()
        conn.execute(tables.runs.update().where(tables.runs.c.name == name).values(**values))

    def get_run(self, name: str) -> dict | None:
        """The run's row as stored.

        Args:
            name: the run.

        Returns:
            A dict of the runs table's columns, `config` parsed into a dict; None when there is no
            such run.
        """
        return reader.get_run(self._db, name)

    def run_info(self, name: str) -> RunInfo:
        """What the detectors need to know of a run besides its metrics.

        Args:
            name: the run.

        Returns:
            Its RunInfo (tokens per step, global batch size, records per epoch, reference).

        Raises:
            GapwatchError: there is no such run.
        """
        return reader.run_info(self._db, name)

    def list_runs(self) -> pd.DataFrame:
        """Every run, for the dashboard's overview and `gapwatch runs`.

        Returns:
            One row per run, newest first, with its open alerts, the worst open severity and the
            worst severity ever found (alerts in any state and stored detections).
        """
        return reader.list_runs(self._db)

    def run_references(self) -> list[tuple[str, str | None]]:
        """Every run with its reference: one small query, for a watch service that looks
        for new runs at every poll.

        Returns:
            (name, reference or None) of every run, oldest first.
        """
        r = tables.runs.c
        with self._db.read() as conn:
            return [(name, ref or None) for name, ref in conn.execute(select(r.name, r.reference).order_by(r.id))]

    def delete_run(self, name: str) -> None:
        """Delete a run with everything that hangs on it, undelivered notifications of its
        alerts too.

        Args:
            name: the run.

        Raises:
            GapwatchError: there is no such run.
        """
        with self._db.tx() as conn:
            run_id = self._db.run_id(conn, name)
            alert_ids = select(tables.alerts.c.id).where(tables.alerts.c.run_id == run_id)
            conn.execute(delete(tables.alert_outbox).where(tables.alert_outbox.c.alert_id.in_(alert_ids)))
            tail_cache.forget(conn, run_id)
            derived.delete_run(conn, run_id)
            for table in (tables.metrics, tables.metric_chunks, tables.series, tables.rollups, tables.events,
                          tables.detections, tables.alerts):
                conn.execute(delete(table).where(table.c.run_id == run_id))
            conn.execute(delete(tables.runs).where(tables.runs.c.id == run_id))
        self._db.forget_run(name)

    def rename_run(self, old: str, new: str) -> None:
        """Rename a run. Its metrics, events, detections and alerts hang on its id and follow;
        runs and detections that name it as their reference name the new one.

        Args:
            old: the run's name now.
            new: its new name, 1 to 255 characters, not taken.

        Raises:
            GapwatchError: no run `old`, or `new` is invalid or taken.
        """
        if not new or len(new) > 255:
            raise GapwatchError(f"run name {new!r} must be 1 to 255 characters")
        r, d = tables.runs.c, tables.detections.c
        with self._db.tx() as conn:
            run_id = self._db.run_id(conn, old)
            if conn.execute(select(r.id).where(r.name == new)).first() is not None:
                raise GapwatchError(f"a run named {new!r} is already in {self.url.redacted()}")
            conn.execute(tables.runs.update().where(r.id == run_id).values(name=new, updated_at=time.time()))
            conn.execute(tables.runs.update().where(r.reference == old).values(reference=new))
            conn.execute(tables.detections.update().where(d.reference == old).values(reference=new))
        self._db.forget_run(old)
        self._db.remember_run(new, run_id)

    def set_reference(self, name: str, reference: str | None) -> None:
        """Record the run's reference.

        Args:
            name: the run.
            reference: another stored run, or None for none.

        Raises:
            GapwatchError: either run is missing, or a run would be its own reference.
        """
        if reference == name:
            raise GapwatchError(f"run {name!r} cannot be its own reference")
        with self._db.tx() as conn:
            self._db.run_id(conn, name)
            if reference is not None:
                self._db.run_id(conn, reference)
            conn.execute(tables.runs.update().where(tables.runs.c.name == name)
                         .values(reference=reference, updated_at=time.time()))

    def runs_referring_to(self, name: str) -> list[str]:
        """The runs that compare themselves with `name`.

        Args:
            name: a run.

        Returns:
            The names of the runs whose reference is `name`, sorted.
        """
        r = tables.runs.c
        with self._db.read() as conn:
            return [n for (n,) in conn.execute(select(r.name).where(r.reference == name).order_by(r.name))]

    def new_attempt(self, name: str) -> int:
        """Count one more attempt of a run: a logging process that starts (or restarts) it.

        Args:
            name: the run.

        Returns:
            The new attempt's number: 1 for its first logging process, 2 after a restart...
        """
        with self._db.tx() as conn:
            self._db.run_id(conn, name)
            return conn.execute(
                tables.runs.update()
                .where(tables.runs.c.name == name)
                .values(attempts=tables.runs.c.attempts + 1, updated_at=time.time())
                .returning(tables.runs.c.attempts)
            ).scalar_one()

    def run_id(self, name: str) -> int:
        """The run's id in the database.

        Args:
            name: the run.

        Returns:
            Its id.

        Raises:
            GapwatchError: there is no such run.
        """
        with self._db.read() as conn:
            return self._db.run_id(conn, name)

    # --- metric keys ---------------------------------------------------------------------------
    def key_ids(self, conn: Connection, names: Iterable[str]) -> dict[str, int]:
        """Ids of metric keys, on a connection the caller holds (inside `atomic`).

        Args:
            conn: the open connection.
            names: metric keys.

        Returns:
            {key: id} of the keys that exist; unknown names are left out.
        """
        return self._db.key_ids(conn, names)

    def list_keys(self, name: str) -> list[str]:
        """The metric keys a run has logged.

        Args:
            name: the run.

        Returns:
            Its keys, sorted (logged series only, not derived ones).
        """
        with self._db.read() as conn:
            run_id = self._db.run_id(conn, name)
            ids = [k for (k,) in conn.execute(select(tables.series.c.key_id).where(tables.series.c.run_id == run_id))]
            names = self._db.key_names(conn, ids)
        return sorted(names[i] for i in ids)

    # --- metrics -------------------------------------------------------------------------------
    def write_metrics(self, name: str, rows: pd.DataFrame | MetricRows,
                      progress: Callable[[], None] | None = None) -> int:
        """Store metric rows of one run: the write path of the client and the importers.

        Steps must be integers >= 0 and keys valid metric keys; a bad row rejects the whole batch
        with one error naming it. Within a batch, a repeated (key, step, attempt) keeps its last
        value. NaN and +/-Inf are stored as such.

        Args:
            name: the run (it must exist: `ensure_run`).
            rows: a long frame (columns step, key, value, and optionally wall_time and attempt,
                default 1), or the logging client's `MetricRows` as it holds them.
            progress: called each time the database has answered a part of the write (a phase,
                a slice of the insert); the logging client tells a slow store from a silent one
                by it, and stops a write it has left by raising there (the write is undone).

        Returns:
            The number of rows given (after duplicates within the batch are merged).

        Raises:
            GapwatchError: a bad step, key or value, or no such run.
        """
        rows = _checked(name, rows if isinstance(rows, MetricRows) else _from_frame(name, rows))
        if not len(rows.steps):
            return 0
        with self._db.tx() as conn:
            run_id = self._db.run_id(conn, name)
            # Each distinct name looked up once, not once a row.
            ids = self._db.ensure_keys(conn, rows.names)
            key_ids = np.array([ids[n] for n in rows.names], dtype=np.int64)[rows.codes]
            batch = metrics_writer.Batch.of(key_ids, rows.steps, rows.attempts, rows.values, rows.wall_times)
            return metrics_writer.write(conn, run_id, batch, progress)

    def write_derived(self, name: str, frame: pd.DataFrame) -> int:
        """Store a detector's series of one run (spike scores) apart from its logged rows.

        Args:
            name: the run.
            frame: columns step, key, value; a step written again takes the new value.

        Returns:
            The number of rows given.
        """
        if frame.empty:
            return 0
        with self._db.tx() as conn:
            run_id = self._db.run_id(conn, name)
            ids = self._db.ensure_keys(conn, frame["key"].unique())
            return derived.write(self._db, conn, run_id, frame, ids)

    def read_derived(self, name: str, keys: Iterable[str] | None = None, step_range: tuple[int, int] | None = None,
                     max_points: int = reader.DEFAULT_MAX_POINTS) -> pd.DataFrame:
        """A run's derived series, point-budgeted like `read_scalars`.

        Args:
            name: the run.
            keys: the derived keys to read; None for all.
            step_range: (first, last) step, inclusive; None for the whole run.
            max_points: at most this many rows per key (each bucket's highest value); at least 1.

        Returns:
            A long frame (key, step, value).
        """
        if max_points < 1:
            raise ValueError("max_points must be at least 1")
        with self._db.read() as conn:
            run_id = self._db.run_id(conn, name)
            names = self._db.key_names(conn, derived.key_ids(conn, run_id))
            if keys is not None:
                wanted = set(keys)
                names = {i: n for i, n in names.items() if n in wanted}
            return derived.read(conn, run_id, names, step_range, max_points)

    @property
    def chunk_steps(self) -> int:
        """Steps one sealed chunk of a series spans (chunks.py): a write whose series reach
        just past a multiple of it goes straight into chunks, not through the row table.

        Returns:
            The store's chunk width in steps.
        """
        with self._db.read() as conn:
            return chunks.width(conn)

    def count_rows(self, name: str) -> int:
        """Metric rows stored for a run, every attempt counted (for tests and progress lines).

        Args:
            name: the run.

        Returns:
            The number of logged rows (derived series not counted).
        """
        with self._db.read() as conn:
            return metric_rows.count(conn, self._db.run_id(conn, name))

    # --- events --------------------------------------------------------------------------------
    def write_events(self, name: str, events: Iterable[dict]) -> int:
        """Store a run's events (checkpoints, resumes, restarts...). An event stored twice is
        kept once (its kind, step, attempt and payload make its identity).

        Args:
            name: the run.
            events: dicts with kind (EventKind or its value) and step, and optionally attempt
                (default 1), payload (a JSON-able dict) and wall_time.

        Returns:
            The number of events given.
        """
        now = time.time()
        rows = []
        for ev in events:
            kind = ev["kind"].value if hasattr(ev["kind"], "value") else str(ev["kind"])
            step = int(ev["step"])
            attempt = int(ev.get("attempt", 1))
            payload = dumps(ev.get("payload") or {})
            dedup = hashlib.sha256(f"{kind}|{step}|{attempt}|{payload}".encode()).hexdigest()
            rows.append({"step": step, "attempt": attempt, "kind": kind, "payload": payload,
                         "wall_time": float(ev.get("wall_time") or now), "dedup_key": dedup})
        if not rows:
            return 0
        with self._db.tx() as conn:
            run_id = self._db.run_id(conn, name)
            for r in rows:
                r["run_id"] = run_id
            self._db.upsert(conn, tables.events, rows, index=["run_id", "dedup_key"], update=[])
        return len(rows)

    def read_events(self, name: str, kinds: Iterable[str] | None = None) -> pd.DataFrame:
        """A run's events.

        Args:
            name: the run.
            kinds: only events of these kinds; None for all.

        Returns:
            A frame (step, kind, attempt, payload as a dict, wall_time) in step order.
        """
        return reader.read_events(self._db, name, kinds)

    # --- the reader ------------------------------------------------------------------------------
    def read_scalars(self, runs, keys, step_range=None, max_points: int = reader.DEFAULT_MAX_POINTS,
                     since_step: int | None = None) -> pd.DataFrame:
        """Point-budgeted series for charts: what the dashboard and report draw.

        Args:
            runs: a run or runs (an unknown run is an error).
            keys: a key or keys (unknown keys give no rows).
            step_range: (first, last) step, inclusive; None for the whole run.
            max_points: at most this many rows per series (MinMax buckets), at least 1.
            since_step: only steps after this one (a live chart's increment).

        Returns:
            A long frame (run, key, step, value), the latest attempt of each step. A downsampled
            series holds finite values only; at full resolution NaN and Inf come back as logged.
            `read_series` gives each series' bucket width too.
        """
        return reader.read_scalars(self._db, runs, keys, step_range=step_range, max_points=max_points,
                                   since_step=since_step)

    def read_bucket_means(self, run: str, key: str, step_range=None) -> pd.DataFrame:
        """A series' local means from its finest rollups: the level of a noisy series (train loss
        from one step to the next) where a chart's min/max points would show its extremes.

        Args:
            run: the run (an unknown run is an error).
            key: the key (an unknown key gives no rows).
            step_range: (first, last) step, inclusive; None for the whole run. The buckets at its
                edges are taken whole.

        Returns:
            A frame (step, value): one row per bucket of `rollups.LEVEL_WIDTHS[0]` steps holding a
            finite value, halfway between the bucket's first step and its last logged one, valued
            at the mean of its finite values (the latest attempt of each step).
        """
        return reader.read_bucket_means(self._db, run, key, step_range)

    def read_series(self, runs, keys, step_range=None, max_points: int = reader.DEFAULT_MAX_POINTS,
                    since_step: int | None = None) -> reader.ChartRead:
        """`read_scalars` with how coarse each series came back, for a chart that says so.

        Args:
            runs, keys, step_range, max_points, since_step: as for `read_scalars`.

        Returns:
            A ChartRead: the rows, and the steps one point stands for per (run, key).
        """
        return reader.read_series(self._db, runs, keys, step_range=step_range, max_points=max_points,
                                  since_step=since_step)

    def load_run(self, name: str, keys: Iterable[str] | None = None) -> RunData:
        """Every logged value of a run at full resolution, for the detectors.

        Args:
            name: the run.
            keys: only these keys; None for all.

        Returns:
            Its RunData: dense and sparse columns, events, repeats of resumed steps, non-finite
            values as logged.
        """
        return reader.load_run(self._db, name, keys)

    def series_marks(self, name: str) -> dict[str, SeriesMark]:
        """Each of a run's series' first and last logged step and rows (kept with every write: no
        scan).

        Args:
            name: the run.

        Returns:
            {key: its SeriesMark}.
        """
        return reader.series_marks(self._db, name)

    def read_alerts(self, name: str, limit: int = 500) -> pd.DataFrame:
        """A run's incidents.

        Args:
            name: the run.
            limit: at most this many, most recently updated first.

        Returns:
            A frame of the alerts table's rows.
        """
        return reader.read_alerts(self._db, name, limit)

    def activity(self, name: str) -> list[list]:
        """A cheap fingerprint of a run's events, detections and alerts that changes whenever any
        of them does (one aggregate query per table): the dashboard redraws only then.

        Args:
            name: the run.

        Returns:
            [[count, latest change] of events, of detections, of alerts].
        """
        return reader.activity(self._db, name)

    # --- the watch service's incremental reads ---------------------------------------------------
    def run_marks(self, name: str) -> RunMarks:
        """The watch service's high-water marks of one run.

        Args:
            name: the run.

        Returns:
            Per key first step, last step and rows, the last event id and the attempts started.
        """
        return increments.marks(self._db, name)

    def runs_marks(self, names: list[str]) -> dict[str, RunMarks]:
        """`run_marks` of several runs in one snapshot of three queries, whatever their number
        (what a watch worker reads once a poll for every run it holds).

        Args:
            names: the runs.

        Returns:
            Run name -> its marks; runs the store does not know are left out.
        """
        return increments.marks_of(self._db, names)

    def run_infos(self, names: Iterable[str]) -> dict[str, RunInfo]:
        """`run_info` of several runs in one query.

        Args:
            names: the runs.

        Returns:
            Run name -> its RunInfo; runs the store does not know are left out.
        """
        return reader.run_infos(self._db, names)

    def read_key_rows(self, name: str, ranges: list[KeyRange]) -> dict[str, KeyRows]:
        """The watch service's read of new rows.

        Args:
            name: the run.
            ranges: per key, the steps to read past its cursor (replays included).

        Returns:
            {key: its rows}; keys the store does not know give none.
        """
        return increments.key_rows(self._db, name, ranges)

    def read_attempt_rows(self, name: str, keys: list[str], lo: int, hi: int) -> dict[str, KeyRows]:
        """Every attempt's rows of some keys over a stretch of steps (a replayed stretch).

        Args:
            name: the run.
            keys: metric keys.
            lo, hi: the steps, inclusive.

        Returns:
            {key: its rows, every attempt}.
        """
        return increments.attempt_rows(self._db, name, keys, lo, hi)

    def read_events_after(self, name: str, event_id: int) -> pd.DataFrame:
        """A run's events newer than the watch service's cursor.

        Args:
            name: the run.
            event_id: the last event id already read.

        Returns:
            A frame (id, step, kind, attempt, payload as a dict) in id order.
        """
        return increments.events_after(self._db, name, event_id)

    def latest_attempts(self, name: str, points: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The highest attempt that logged each of some (key, step) points.

        Args:
            name: the run.
            points: (key, step) pairs.

        Returns:
            {(key, step): attempt}; pairs nobody logged are left out.
        """
        return increments.latest_attempts(self._db, name, points)

    # --- detections ----------------------------------------------------------------------------
    def write_detections(self, detections: Iterable[Detection]) -> int:
        """Store detections; one found again (same run, detector, metric and first step) is
        updated in place, so a growing finding stays one row.

        Args:
            detections: the findings.

        Returns:
            The number stored.
        """
        now = time.time()
        rows = []
        with self._db.tx() as conn:
            for d in detections:
                rows.append({
                    "run_id": self._db.run_id(conn, d.run), "detector": d.detector, "metric": d.metric,
                    "start_step": int(d.start_step), "end_step": int(d.end_step), "peak_step": int(d.peak_step),
                    "score": float(d.score) if d.score is not None else None,
                    "severity": Severity(d.severity).value, "message": d.message,
                    "evidence": dumps(d.to_dict()["evidence"]), "reference": d.reference,
                    "attempt": d.attempt, "created_at": now, "updated_at": now, "known_step": d.known_step,
                })
            if rows:
                self._db.upsert(
                    conn, tables.detections, rows,
                    index=["run_id", "detector", "metric", "start_step"],
                    update=["end_step", "peak_step", "score", "severity", "message", "evidence", "reference",
                            "attempt", "updated_at", "known_step"],
                )
        return len(rows)

    def read_detections(self, run: str | None = None, detector: str | None = None) -> list[Detection]:
        """Stored detections.

        Args:
            run: only this run's; None for every run.
            detector: only this detector's; None for all.

        Returns:
            The detections.
        """
        return reader.read_detections(self._db, run, detector)

    def clear_detections(self, run: str, detectors: Iterable[str] | None = None) -> None:
        """Forget a run's stored detections before a fresh pass.

        Args:
            run: the run.
            detectors: only these detectors' findings; None for all.
        """
        d = tables.detections.c
        with self._db.tx() as conn:
            cond = d.run_id == self._db.run_id(conn, run)
            if detectors is not None:
                cond = and_(cond, d.detector.in_(list(detectors)))
            conn.execute(delete(tables.detections).where(cond))

    # --- service state ---------------------------------------------------------------------------
    def save_state(self, name: str, payload: dict) -> None:
        """Save a service's state (a watch worker's detector state) under a name.

        Args:
            name: the state's name.
            payload: JSON-able; NaN kept.
        """
        with self._db.tx() as conn:
            self._db.upsert(conn, tables.service_state,
                            [{"name": name, "payload": dumps(payload), "updated_at": time.time()}],
                            index=["name"], update=["payload", "updated_at"])

    def delete_states(self, names: Iterable[str]) -> None:
        """Forget saved service state (rebuilt from the data by whoever saved it).

        Args:
            names: the states' names.
        """
        with self._db.tx() as conn:
            conn.execute(delete(tables.service_state).where(tables.service_state.c.name.in_(list(names))))

    def state_names(self, prefix: str) -> list[str]:
        """Names of the saved service states that start with `prefix`.

        Args:
            prefix: the start of the names (taken literally: `%` and `_` are no wildcards).

        Returns:
            The names, sorted.
        """
        name = tables.service_state.c.name
        with self._db.read() as conn:
            # Sorted here: a database's collation may order punctuation its own way.
            return sorted(conn.execute(select(name).where(name.startswith(prefix, autoescape=True))).scalars())

    def load_state(self, name: str) -> dict | None:
        """A service's saved state.

        Args:
            name: the state's name.

        Returns:
            The payload as saved; None when nothing is saved under that name.
        """
        with self._db.read() as conn:
            raw = conn.execute(
                select(tables.service_state.c.payload).where(tables.service_state.c.name == name)
            ).scalar()
        return json.loads(raw) if raw is not None else None


def _from_frame(run: str, frame: pd.DataFrame) -> MetricRows:
    """A long frame's rows as arrays: each step an integer, each value a float (NaN and +/-Inf
    kept), or one error naming the first that is not."""
    missing = {"step", "key", "value"} - set(frame.columns)
    if missing:
        raise GapwatchError(f"metrics for run {run!r} lack column(s) {sorted(missing)}")
    keys = frame["key"]
    if isinstance(keys.dtype, pd.CategoricalDtype):
        # An importer's names as codes: a string per row would cost more than the write.
        keys = keys.cat.rename_categories(keys.cat.categories.astype(str))
    else:
        keys = keys.astype(str)
    steps = frame["step"]
    if isinstance(steps.dtype, np.dtype) and steps.dtype.kind in "iu":  # already plain integers
        steps = steps.to_numpy(np.int64)
        bad = steps < 0
    else:
        numeric = pd.to_numeric(steps, errors="coerce")
        bad = (numeric.isna() | (numeric < 0) | (numeric != np.floor(numeric))).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GapwatchError(f"run {run!r}: step {frame['step'].iloc[i]!r} is not a non-negative integer")
    if not isinstance(steps, np.ndarray):
        steps = numeric.astype("int64").to_numpy()
    values = frame["value"]
    if isinstance(values.dtype, np.dtype) and values.dtype.kind == "f":
        values = values.to_numpy(float)
    else:
        numeric = pd.to_numeric(values, errors="coerce")
        unparsed = numeric.isna().to_numpy() & values.notna().to_numpy()
        bad = [i for i in np.flatnonzero(unparsed) if not _is_nan_like(values.iloc[i])]
        if bad:
            i = int(bad[0])
            raise GapwatchError(
                f"run {run!r}: value {values.iloc[i]!r} of {frame['key'].iloc[i]!r} at step "
                f"{steps[i]} is not a number"
            )
        values = numeric.astype(float).to_numpy()
    now = time.time()
    if "wall_time" not in frame:
        walls = np.full(len(frame), now)
    else:
        walls = pd.to_numeric(frame["wall_time"], errors="coerce").to_numpy(float, copy=True)
        walls[np.isnan(walls)] = now
    attempts = frame["attempt"].to_numpy(np.int64) if "attempt" in frame else np.ones(len(frame), np.int64)
    # Only the names of rows count (factorize leaves a categorical's unused ones out).
    codes, names = pd.factorize(keys)
    if (codes < 0).any():  # a missing key of a categorical column
        i = int(np.flatnonzero(codes < 0)[0])
        raise GapwatchError(f"run {run!r}: metric key {frame['key'].iloc[i]!r} is not of the form namespace/name in "
                            f"lower snake case")
    return MetricRows(steps, codes, [str(n) for n in names], values, walls, attempts)


def _checked(run: str, rows: MetricRows) -> MetricRows:
    """`rows` with the names no row uses left out, once every step is >= 0 and every name a valid
    metric key; else one error naming the first that is not."""
    negative = np.flatnonzero(rows.steps < 0)
    if negative.size:
        raise GapwatchError(f"run {run!r}: step {int(rows.steps[negative[0]])!r} is not a non-negative integer")
    used = np.bincount(rows.codes, minlength=len(rows.names)) > 0 if len(rows.codes) else np.zeros(0, bool)
    bad_keys = [n for n, u in zip(rows.names, used) if u and not is_valid_key(n)]
    if bad_keys:
        raise GapwatchError(
            f"run {run!r}: metric key {bad_keys[0]!r} is not of the form namespace/name in lower snake case"
        )
    if used.all():
        return rows
    remap = np.cumsum(used) - 1
    return replace(rows, codes=remap[rows.codes], names=[n for n, u in zip(rows.names, used) if u])


def _is_nan_like(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("nan", "+nan", "-nan")
    try:
        return bool(np.isnan(v))
    except TypeError:
        return False
