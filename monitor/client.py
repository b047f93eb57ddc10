"""The logging client: `Monitor(run).log(step, metrics)` from any trainer, in microseconds.

The calling thread only appends to a queue. A background writer thread turns values into floats
(so a JAX array is fetched from the device there, a step or more after it was logged, never on the
training thread), batches them, and writes to the store every `flush_interval_s`. When the store
cannot be reached the batches go to an append-only spool file and are replayed, in order, when it
comes back; writes are idempotent, so a batch that was half-written before a failure is safe to
replay. Nothing accepted is lost at exit or on SIGTERM; SIGKILL loses at most one flush interval.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import math
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import platformdirs

from monitor.jsonutil import dumps
from monitor.schema import EventKind, RunStatus

log = logging.getLogger("gapwatch.client")


@dataclass
class MonitorConfig:
    flush_interval_s: float = 1.0
    """Seconds between writes to the store: also the most a SIGKILL can lose."""
    spool_dir: Path | None = None
    """Where batches wait while the store is unreachable (default: per-user cache dir)."""
    retry_interval_s: float = 2.0
    """Seconds between attempts to reach an unreachable store."""
    handle_sigterm: bool = True
    """Flush on SIGTERM before the previous handler runs (only when created on the main thread)."""
    max_queue: int = 1_000_000
    """Entries held in memory before `log` starts dropping the oldest (a store down for hours)."""
    extra: dict[str, Any] = field(default_factory=dict)


class NullMonitor:
    """The same face as Monitor, doing nothing: call sites need no `if monitoring:`."""

    attempt = 0
    run = None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def event(self, kind: str | EventKind, step: int, **payload: Any) -> None:
        pass

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self, status: str | RunStatus | None = None) -> None:
        pass

    def __enter__(self) -> "NullMonitor":
        return self

    def __exit__(self, *exc) -> None:
        pass


class Monitor:
    def __init__(
        self,
        run: str,
        store: Any = None,
        *,
        config: dict[str, Any] | None = None,
        project: str | None = None,
        reference: str | None = None,
        tokens_per_step: float | None = None,
        source: str = "gapwatch",
        attempt: int | None = None,
        settings: MonitorConfig | None = None,
        flush_interval_s: float | None = None,
    ) -> None:
        """`store` is a URL (None: $GAPWATCH_STORE or the default SQLite file) or an open Store.
        `attempt` is normally left to the store (one more than the run's last); pass it when several
        hosts log into one run, so they agree."""
        self.run = run
        self.settings = settings or MonitorConfig()
        if flush_interval_s is not None:
            self.settings.flush_interval_s = flush_interval_s
        self._store_arg = store
        self._run_fields = dict(project=project, config=config or {}, reference=reference,
                                tokens_per_step=tokens_per_step, source=source)
        self.attempt = attempt
        self._queue: collections.deque = collections.deque()
        self._store = None
        self._closed = False
        self._lock = threading.Lock()  # one flush at a time (writer thread vs close/flush)
        self._wake = threading.Event()
        self._flushed = threading.Condition()
        self._enqueued = 0
        self._written = 0
        spool_root = self.settings.spool_dir or Path(platformdirs.user_cache_dir("gapwatch")) / "spool"
        self._spool_dir = Path(spool_root) / _safe(run)
        # The pid in the name tells a live writer's spool from one a killed process left behind.
        self._spool_path = self._spool_dir / f"{os.getpid()}-{uuid.uuid4().hex}.jsonl"
        self._next_retry = 0.0
        self._connect()
        self._thread = threading.Thread(target=self._loop, name=f"gapwatch-writer-{run}", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        self._prev_sigterm = None
        if self.settings.handle_sigterm and threading.current_thread() is threading.main_thread():
            self._prev_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    # --- the hot path ------------------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Queue metrics for `step`. Values may be floats, NumPy scalars or JAX arrays; nothing is
        converted or copied from a device here."""
        if self._closed:
            raise RuntimeError(f"Monitor for run {self.run!r} is closed")
        if len(self._queue) >= self.settings.max_queue:
            self._queue.popleft()
            log.warning("gapwatch queue full: dropped the oldest entry")
        self._queue.append(("m", step, dict(metrics), time.time()))
        self._enqueued += 1

    def event(self, kind: str | EventKind, step: int, **payload: Any) -> None:
        if self._closed:
            raise RuntimeError(f"Monitor for run {self.run!r} is closed")
        kind = kind.value if isinstance(kind, EventKind) else str(kind)
        self._queue.append(("e", step, {"kind": kind, "payload": payload}, time.time()))
        self._enqueued += 1

    # --- lifecycle -----------------------------------------------------------------------------------
    def flush(self, timeout: float | None = 30.0) -> bool:
        """Write everything queued so far (to the store, or the spool if it is down)."""
        target = self._enqueued
        self._wake.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._flushed:
            while self._written < target and self._thread.is_alive():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._flushed.wait(remaining if remaining is not None else 0.5)
        if not self._thread.is_alive():
            self._flush_once()
        return True

    def close(self, status: str | RunStatus | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=60)
        self._flush_once()
        if status is not None and self._store is not None:
            try:
                self._store.update_run(self.run, status=status)
            except Exception as exc:  # noqa: BLE001 - a status update must not crash a finished run
                log.warning("gapwatch: could not set status of %s: %s", self.run, exc)
        if self._store is not None:
            self._store.close()
        if self._prev_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._prev_sigterm)
        atexit.unregister(self.close)

    def __enter__(self) -> "Monitor":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(status=RunStatus.CRASHED if exc_type else RunStatus.FINISHED)

    def _on_sigterm(self, signum, frame) -> None:
        self.close(status=RunStatus.CRASHED)
        prev = self._prev_sigterm
        if callable(prev):
            prev(signum, frame)
        else:
            raise SystemExit(128 + signum)

    # --- the writer thread -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.settings.flush_interval_s)
            self._wake.clear()
            self._flush_once()

    def _flush_once(self) -> None:
        with self._lock:
            batch = []
            while self._queue:
                batch.append(self._queue.popleft())
            if batch:
                metrics, events = _to_rows(batch)
                self._deliver({"attempt": self.attempt, "metrics": metrics, "events": events})
            elif self._spool_path.exists() or self._has_leftover_spools():
                self._deliver(None)
            with self._flushed:
                self._written += len(batch)
                self._flushed.notify_all()

    def _deliver(self, batch: dict | None) -> None:
        """Write the spool (older batches) and then this batch; spool this one if the store fails."""
        if self._store is None and time.monotonic() >= self._next_retry:
            self._connect()
        if self._store is not None:
            try:
                self._replay_spools()
                if batch is not None:
                    self._write(batch)
                return
            except Exception as exc:  # noqa: BLE001 - any store failure means: spool and retry
                log.warning("gapwatch: store unreachable (%s); spooling to %s", exc, self._spool_dir)
                self._drop_store()
        if batch is not None:
            self._append_spool(batch)

    def _connect(self) -> None:
        from monitor.store import Store, open_store

        try:
            store = self._store_arg if isinstance(self._store_arg, Store) else open_store(self._store_arg)
            store.ensure_run(self.run, **{k: v for k, v in self._run_fields.items() if v is not None})
            self._store = store
            # Spools left by killed processes hold earlier attempts than ours: number them first.
            self._replay_spools(own=False)
            if self.attempt is None:
                self.attempt = store.new_attempt(self.run)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the store means: spool
            self._drop_store()
            log.warning("gapwatch: store unreachable (%s); logging to the spool until it is back", exc)

    def _drop_store(self) -> None:
        self._store = None
        self._next_retry = time.monotonic() + self.settings.retry_interval_s

    def _write(self, batch: dict) -> None:
        attempt = batch["attempt"] if batch["attempt"] is not None else self.attempt
        with self._store.atomic():
            if batch["metrics"]:
                frame = pd.DataFrame(batch["metrics"], columns=["step", "key", "value", "wall_time"])
                frame["attempt"] = attempt
                self._store.write_metrics(self.run, frame)
            if batch["events"]:
                self._store.write_events(self.run, [dict(e, attempt=attempt) for e in batch["events"]])

    # --- the spool ---------------------------------------------------------------------------------------
    def _append_spool(self, batch: dict) -> None:
        self._spool_dir.mkdir(parents=True, exist_ok=True)
        line = dumps(batch) + "\n"
        with open(self._spool_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _has_leftover_spools(self) -> bool:
        return self._spool_dir.exists() and any(
            not _writer_alive(p) for p in self._spool_dir.glob("*.jsonl")
        )

    def _replay_spools(self, own: bool = True) -> None:
        """Replay this run's spool files, oldest first: those a killed process left behind, then
        (with `own`) ours. A live process's spool is its own business."""
        if not self._spool_dir.exists():
            return
        files = sorted(self._spool_dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        for path in files:
            if path == self._spool_path and not own:
                continue
            if path != self._spool_path and _writer_alive(path):
                continue
            foreign_attempt = None
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            for line in lines:
                if not line.endswith("\n"):
                    break  # the last line of a file whose writer was killed mid-write
                batch = json.loads(line)
                if batch["attempt"] is None and path != self._spool_path:
                    # A process that never reached the store: its rows were a separate attempt.
                    foreign_attempt = foreign_attempt or self._store.new_attempt(self.run)
                    batch["attempt"] = foreign_attempt
                self._write(batch)
            path.unlink()


def _to_rows(batch: list[tuple]) -> tuple[list[list], list[dict]]:
    """Turn queued entries into plain rows. Converting a JAX array here is the device fetch."""
    metrics: list[list] = []
    events: list[dict] = []
    for kind, step, body, wall in batch:
        if kind == "m":
            for key, value in body.items():
                metrics.append([int(step), key, _to_float(value), wall])
        else:
            events.append({"step": int(step), "kind": body["kind"], "payload": body["payload"], "wall_time": wall})
    return metrics, events


def _to_float(value: Any) -> float:
    """A value that is not a number is stored as NaN (and said once), never dropped silently."""
    try:
        return float(value)
    except (TypeError, ValueError):
        log.warning("gapwatch: %r is not a number; stored as NaN", value)
        return math.nan


def _writer_alive(spool: Path) -> bool:
    pid_text = spool.name.split("-", 1)[0]
    if not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:100] or "run"
