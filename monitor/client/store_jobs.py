"""One store operation of the logging client, on a thread of its own, so the writer can leave it.

TCP keepalives, tcp_user_timeout and statement_timeout bound what they can see, but not a path
that freezes with its sockets open (a proxy or a stuck NAT: the kernel keeps acknowledging, the
server never sees the query). So the writer keeps its own deadline: it waits on a job only while
the job makes progress, then spools the job's batch and leaves the job behind. Writes are
idempotent, so a left-behind job that finishes after the thaw and the replay of its batch store
each row once. A job that is left behind stops before its next write.

A job connects (when it has no store), replays a bounded part of the spool, writes its batch
and, last, sets the run's status. A batch the store refuses for what it holds (not for being unreachable) is
quarantined, so it can never block the batches behind it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from monitor.client.metric_columns import MetricColumns
from monitor.client.spool import Spool
from monitor.errors import GapwatchError
from monitor.store import Store, open_store
from monitor.store.errors import describe_db_error, is_unreachable

log = logging.getLogger("gapwatch.client")


class Abandoned(Exception):
    """The writer stopped waiting for this job: it must not write any more."""


@dataclass
class Target:
    """Where a run's rows go: fixed for the life of a Monitor."""

    run: str
    store_arg: Any
    """A URL (None: the default store) or an open Store the caller owns."""
    run_fields: dict[str, Any]
    statement_timeout_s: float | None

    @property
    def owns_store(self) -> bool:
        return not isinstance(self.store_arg, Store)

    def connect(self) -> Store:
        if isinstance(self.store_arg, Store):
            store = self.store_arg
        else:
            store = open_store(self.store_arg, statement_timeout_s=self.statement_timeout_s)
        store.ensure_run(self.run, **{k: v for k, v in self.run_fields.items() if v is not None})
        return store


@dataclass
class StoreJob:
    target: Target
    spool: Spool
    wake: threading.Event
    """Set when the job ends, so the writer looks at it at once."""
    store: Store | None
    attempt: int | None
    batch: dict | None
    entries: int = 0
    """Logged entries in `batch` (what flush() counts)."""
    status: str | None = None
    final: bool = False
    """Close the store after the job (the Monitor is closing)."""
    started: float = field(default_factory=time.monotonic)
    progress_at: float = field(default_factory=time.monotonic)
    backlog: bool = False
    """`batch` is part of a backlog (the trainer outpaced the store): held in memory like the rest
    of it, never spooled for being slow."""
    spooled: bool = False
    """The writer already spooled `batch` (the job was slow): a success then counts nothing new."""
    confirmed: set = field(default_factory=set)
    """Ids of batches this process spooled and later saw written: a replay skips them."""
    written: bool = False
    """`batch` is in the store."""
    abandoned: bool = False
    abandoned_at: float = math.inf
    """When the writer left it; progress after that says the store answers again."""
    error: BaseException | None = None
    budget_rows: int = 20_000
    """Spooled rows this job replays at most; the next job carries on."""
    piece_rows: int = 20_000
    """Rows in one write of the replay."""
    spool_progress: dict = field(default_factory=dict)
    """Per spool file, how far earlier jobs got: (batches written, rows of the next one)."""
    spool_left: bool = False
    """The replay stopped at its budget with spooled rows still to write."""
    replayed_rows: int = 0
    rows_written: int = 0
    write_s: float = 0.0
    """Seconds spent in writes, for the writer's measure of the store's speed."""
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.progress_at = self.started  # later than started only once the store answered

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"gapwatch-store-{self.target.run}", daemon=True).start()

    def _check(self) -> None:
        if self.abandoned:
            raise Abandoned()

    def _progress(self) -> None:
        self.progress_at = time.monotonic()

    def _answered(self) -> None:
        """The store answered a part of a write: progress, the writer's sign of a slow store rather
        than a silent one. A job left behind stops here, its transaction undone, so it neither
        holds the store (SQLite's one writer) nor writes what the spool will replay."""
        self._progress()
        self._check()

    def _run(self) -> None:
        try:
            if self.store is None:
                self.store = self.target.connect()
                self._progress()
            self._replay()
            self._check()
            if self.attempt is None:
                self.attempt = self.store.new_attempt(self.target.run)
            if self.batch is not None and not self.written:
                own = self.batch.get("attempt")
                self._write_or_quarantine(self.batch, self.attempt if own is None else own)
                self.written = True
            if self.status is not None:
                self._check()
                self.store.update_run(self.target.run, status=self.status)
        except Abandoned:
            pass
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the writer, which spools
            self.error = exc
            if not is_unreachable(exc) and not _is_connect_error(exc):
                log.exception("gapwatch: unexpected error writing run %r (treated as unreachable)", self.target.run)
        finally:
            drop = self.abandoned or self.error is not None or self.final
            if drop and self.store is not None and self.target.owns_store:
                self.store.close()
            self.done.set()
            self.wake.set()

    def _replay(self) -> None:
        """Replay the spool, oldest first, up to `budget_rows` rows: a long outage's spool is
        replayed over several jobs, each a bounded write, and each resumes where the last stopped
        (`spool_progress`), so every job makes progress however large the spool. Those of dead
        processes come before this process takes an attempt number, since theirs were earlier."""
        self._check()
        self.spool.seal()
        foreign_attempts: dict[str, int] = {}
        for path in self.spool.pending():
            if self.replayed_rows >= self.budget_rows:
                self.spool_left = True
                return
            own = self.spool.is_own(path)
            if own and self.attempt is None:
                self.attempt = self.store.new_attempt(self.target.run)
            batches, bad = Spool.read(path)
            self._progress()  # reading a large segment is this process's work, not the store's silence
            for batch in batches:
                if batch.get("attempt") is None:
                    if own:
                        batch["attempt"] = self.attempt
                    else:
                        # A process that never reached the store: its rows were an attempt of their own.
                        owner = self.spool.owner(path)
                        if owner not in foreign_attempts:
                            foreign_attempts[owner] = self.store.new_attempt(self.target.run)
                        batch["attempt"] = foreign_attempts[owner]
            if not self._replay_file(path, batches):
                self.spool_left = True
                return
            for line in bad:
                kept = self.spool.quarantine({"run": self.target.run, "error": "not a batch", "line": line})
                log.warning("gapwatch: a damaged line in the spool %s of run %r was moved to %s",
                            path, self.target.run, kept)
            path.unlink(missing_ok=True)
            self.spool_progress.pop(path.name, None)

    def _replay_file(self, path, batches: list[dict]) -> bool:
        """Write the file's batches from where the last job stopped, in groups of up to
        `piece_rows` rows; True once it is all written, False when the budget ran out first."""
        mine = self.batch.get("id") if self.batch is not None else None
        group: list[dict] = []
        rows = 0
        for index, through, whole, piece in self._pieces(path, batches):
            if group and (group[0]["attempt"] != piece["attempt"] or rows + _rows(piece) > self.piece_rows):
                if not self._replay_group(path, group, mine):
                    return False
                group, rows = [], 0
            piece["_at"] = (index + 1, 0) if whole else (index, through)
            group.append(piece)
            rows += _rows(piece)
        return not group or self._replay_group(path, group, mine)

    def _pieces(self, path, batches: list[dict]):
        """(batch index, rows through, whole batch done, piece) from where the last job stopped;
        a batch larger than a write comes in several pieces."""
        done_batch, done_rows = self.spool_progress.get(path.name, (0, 0))
        own = self.spool.is_own(path)
        for index in range(done_batch, len(batches)):
            batch = batches[index]
            if own and batch.get("id") in self.confirmed:  # a slow write spooled too that went through
                continue
            cols = MetricColumns.from_rows(batch.get("metrics", []))
            offset = done_rows if index == done_batch else 0
            cols = cols.split(offset)[1]
            events = [] if offset else batch.get("events", [])
            while True:
                head, cols = cols.split(self.piece_rows)
                offset += len(head)
                yield index, offset, not len(cols), {"id": batch.get("id"), "attempt": batch["attempt"],
                                                     "metrics": head, "events": events}
                events = []
                if not len(cols):
                    break

    def _replay_group(self, path, group: list[dict], mine) -> bool:
        """Write one group and note how far the file is written; False when the budget is spent."""
        if self.replayed_rows >= self.budget_rows:
            return False
        self._check()
        self._write_group(group)
        self.replayed_rows += sum(_rows(b) for b in group)
        self.spool_progress[path.name] = group[-1]["_at"]
        # flush() spools a batch and hands it to a job: written here, not again below.
        if mine is not None and any(b.get("id") == mine and b["_at"][1] == 0 for b in group):
            self.written = True
        return True

    def _write_group(self, group: list[dict]) -> None:
        """Several spooled batches as one write (a replay after a long outage is thousands of
        small batches); if the store refuses the whole, each alone, so only a bad one is kept out."""
        if len(group) == 1:
            self._write_or_quarantine(group[0], group[0]["attempt"])
            return
        merged = {"attempt": group[0]["attempt"],
                  "metrics": MetricColumns.concat([b["metrics"] for b in group]),
                  "events": [e for b in group for e in b.get("events", [])]}
        try:
            self._timed_write(merged, merged["attempt"])
        except Exception as exc:  # noqa: BLE001 - sorted into "retry later" and "one of them is bad"
            if isinstance(exc, Abandoned) or is_unreachable(exc):
                raise
            for batch in group:
                self._check()
                self._write_or_quarantine(batch, batch["attempt"])

    def _timed_write(self, batch: dict, attempt: int) -> None:
        """write_batch, measured: the writer sizes its batches to the store's speed."""
        began = time.monotonic()
        write_batch(self.store, self.target.run, batch, attempt, self._answered)
        self.write_s += time.monotonic() - began
        self.rows_written += _rows(batch)
        self._progress()

    def _write_or_quarantine(self, batch: dict, attempt: int) -> None:
        try:
            self._timed_write(batch, attempt)
        except Exception as exc:  # noqa: BLE001 - sorted into "retry later" and "never"
            if isinstance(exc, Abandoned) or is_unreachable(exc):
                raise
            reason = describe_db_error(exc)
            kept = self.spool.quarantine({"run": self.target.run, "error": reason,
                                          "batch": {k: v for k, v in spool_form(batch).items() if k != "_at"}})
            metrics = _columns(batch)
            steps = metrics.steps.tolist() or [e["step"] for e in batch.get("events", [])]
            span = f"steps {min(steps)}..{max(steps)}" if steps else "no steps"
            log.warning("gapwatch: the store refused a batch of run %r (%s) and always will: %s; "
                        "kept in %s", self.target.run, span, reason, kept)
        self._progress()


def write_batch(store: Store, run: str, batch: dict, attempt: int, progress=None) -> None:
    """One batch, all or nothing: metric rows (MetricColumns, or [step, key, value, wall_time]
    rows as the spool keeps them) and events. `progress()` is called as the store answers parts
    of the write."""
    metrics = _columns(batch)
    with store.atomic():
        if len(metrics):
            store.write_metrics(run, metrics.for_store(attempt), progress)
        if batch.get("events"):
            store.write_events(run, [dict(e, attempt=attempt) for e in batch["events"]])


def spool_form(batch: dict) -> dict:
    """A batch as the spool writes it: JSON, metric rows as lists."""
    metrics = batch.get("metrics")
    return dict(batch, metrics=metrics.rows() if isinstance(metrics, MetricColumns) else metrics or [])


def _columns(batch: dict) -> MetricColumns:
    metrics = batch.get("metrics")
    return metrics if isinstance(metrics, MetricColumns) else MetricColumns.from_rows(metrics or [])


def _rows(batch: dict) -> int:
    return len(batch.get("metrics") or []) + len(batch.get("events") or [])


def _is_connect_error(exc: BaseException) -> bool:
    return isinstance(exc, GapwatchError) and str(exc).startswith("cannot open store")
