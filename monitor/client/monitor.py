"""The Monitor: `Monitor(run).log(step, metrics)` from any trainer, in microseconds.

The calling thread checks the key and step (log_call.py) and appends to a queue; nothing else,
and nothing per call that the garbage collector must follow. A writer thread turns queued calls
into columns (metric_columns.py) several times an interval, in bounded parts (each part holds the
interpreter lock, and so the training thread, for its length), turning values into floats there
(so a JAX array is fetched from the device there, never on the training thread), and on a fixed
cadence (every `flush_interval_s` from the start, not from the end of the last write) hands a
batch to a store job (store_jobs.py) that it waits on only while the store answers: each part of
a write the store answers counts, so a long write that keeps answering is a slow store, not a
gone one. A batch holds what the store writes in a fraction of an interval at its measured speed;
a backlog beyond that is written batch after batch without waiting for the next tick, and said
once as backpressure (a store slower than the trainer is not an outage). A batch of a trainer's
usual pace that the store has not taken within half an interval goes to an append-only, fsynced
spool (spool.py), and stays there while the store is unreachable; the spool is replayed, in
order and in bounded parts, once it answers again. Writes are idempotent, so a batch both
written late and replayed is stored once. So: SIGKILL loses at most about one flush interval
(plus, while the trainer logs faster than the store writes, the backlog in memory), SIGTERM and
exit lose nothing, and no call of the trainer's waits on the store: `flush()` and `close()`
return within their bounds, leaving in the spool what the store would not take.
"""

from __future__ import annotations

import atexit
import collections
import gc
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from monitor.client.log_call import InvalidLogError, LogChecks, snapshot
from monitor.client.metric_columns import MetricColumns
from monitor.client.outage import Outage
from monitor.client.spool import Spool
from monitor.schema import EventKind, RunStatus

log = logging.getLogger("gapwatch.client")

__all__ = ["InvalidLogError", "Monitor", "MonitorSettings", "NullMonitor"]

# Rows of one batch: at least enough that a write's fixed cost is small, at most what one write's
# whole-batch steps (validating, sorting, marks) may hold the interpreter lock for, which a
# training thread that logs meanwhile waits out; between, what the store writes in `_batch_s()`
# at its measured speed (START_RATE before the first write).
MIN_BATCH_ROWS = 10_000
MAX_BATCH_ROWS = 100_000
START_RATE = 20_000.0
# Rows the writer turns into columns in one conversion (see _take_queue). A conversion's NumPy and
# pandas steps let go of the interpreter lock, and a writer that let go waits out the interpreter's
# whole switch interval to get it back from a training thread that logs flat out: parts must be
# large enough that those waits are small against the work (or the queue outgrows the writer), and
# small enough that one part's hold on the lock stays well under what a log() call may wait.
TAKE_ROWS = 100_000

# Store jobs left behind (stuck on a frozen connection) before the writer stops starting new
# ones: each holds a thread and a connection until the path thaws or a TCP timeout ends it.
MAX_LEFT_BEHIND = 4


@dataclass
class MonitorSettings:
    """How the client writes (cadence, spool, deadlines): `Monitor(settings=...)`. The run's own
    configuration (hyperparameters) is `Monitor(config=...)`, as in `wandb.init(config=, settings=)`."""

    flush_interval_s: float = 1.0
    """Seconds between writes to the store, on a fixed cadence: also the most a SIGKILL loses."""
    spool_dir: Path | None = None
    """Where batches wait while the store is unreachable (default: per-user cache dir)."""
    retry_interval_s: float = 2.0
    """Seconds between attempts to reach an unreachable store."""
    write_timeout_s: float = 5.0
    """How long the writer waits on a store that answers no part of a write before it declares
    it unreachable and leaves the operation behind (its batch is in the spool by then)."""
    flush_timeout_s: float = 5.0
    """The longest `flush()` waits when given no timeout."""
    close_timeout_s: float = 5.0
    """The longest `close()` waits for the store beyond writing a backlog; what it would not take
    stays in the spool."""
    close_drain_s: float = 120.0
    """The longest `close()` keeps writing a backlog (a trainer that logged faster than the store
    writes) to a store that takes a batch at least every close_timeout_s; what is left by then
    stays in the spool."""
    statement_timeout_s: float = 30.0
    """Server-side bound on one statement (PostgreSQL statement_timeout, SQLite busy timeout), so
    a session stuck behind a frozen connection releases its locks."""
    on_invalid: str = "raise"
    """A bad key or step in `log()`: "raise" (InvalidLogError at the call) or "warn" (drop that
    value or call, warning once per key and problem)."""
    handle_sigterm: bool = True
    """Flush on SIGTERM before the previous handler runs (only when created on the main thread)."""
    max_queue: int = 1_000_000
    """Entries held in memory before `log` starts dropping the oldest (a writer that cannot keep up)."""
    freeze_gc: bool = True
    """At the first Monitor of a process, collect garbage once and freeze what survives (gc.freeze()).
    A full collection walks every object the collector tracks and holds the interpreter lock while
    it does, so with the imports of a trainer it stalls whatever call is running, `log()` included;
    frozen objects are left out of that walk. They are still freed when their last reference goes;
    only a reference cycle among them outlives its use. False leaves the collector as it is."""


_setup_frozen = False


def _freeze_setup_once() -> None:
    """What exists when the first Monitor starts is the trainer's setup (modules, model, data
    pipeline), alive for the whole run: collecting it again on every full collection only costs
    the training thread. Later Monitors of the process leave the collector alone."""
    global _setup_frozen
    if not _setup_frozen:
        _setup_frozen = True
        gc.collect()
        gc.freeze()


def launcher_rank() -> int:
    """This process's rank in a torch.distributed job, as its launcher (torchrun, accelerate,
    DeepSpeed) sets `RANK` and `WORLD_SIZE`; 0 outside one."""
    try:
        world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0
    return rank if world > 1 else 0


class NullMonitor:
    """The same face as Monitor, doing nothing: call sites need no `if monitoring:`."""

    attempt = 0

    def __init__(self, run: str | None = None) -> None:
        self.run = run

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def event(self, kind: str | EventKind, step: int, **payload: Any) -> None:
        pass

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, status: str | RunStatus | None = None) -> None:
        pass

    def __enter__(self) -> "NullMonitor":
        return self

    def __exit__(self, *exc) -> None:
        pass


class Monitor:
    """One run's metrics and events, logged into a store (see the module's docstring). In a
    torch.distributed job only rank 0 logs, unless the ranks are given their `attempt`."""

    def __new__(cls, run: str, *args: Any, attempt: int | None = None, **kwargs: Any) -> "Monitor":
        # Every process of a torch.distributed job runs the same script: were each to log, one
        # run would read as a restart per process. Rank 0 logs it, as Lightning and HF Trainer do;
        # hosts that log their own metrics into one run agree on `attempt` instead.
        rank = launcher_rank()
        if attempt is None and rank > 0:
            log.info("%s: rank %d of a torch.distributed job logs nothing; rank 0 logs the run "
                     "(pass attempt= to log from every rank)", run, rank)
            return NullMonitor(run)  # type: ignore[return-value]
        return super().__new__(cls)

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
        settings: MonitorSettings | None = None,
        flush_interval_s: float | None = None,
    ) -> None:
        """`store` is a URL (None: $GAPWATCH_STORE or the default SQLite file) or an open Store.
        `attempt` is normally left to the store (one more than the run's last); pass it when several
        hosts log into one run, so they agree (in a torch.distributed job, ranks other than 0 log
        only when given one). Waits at most `write_timeout_s` for the store."""
        from monitor.client.store_jobs import Target

        self.run = run
        self.settings = settings or MonitorSettings()
        if flush_interval_s is not None:
            self.settings.flush_interval_s = flush_interval_s
        self.attempt = attempt
        self._checks = LogChecks(run, self.settings.on_invalid)
        spool_root = self.settings.spool_dir or Path(platformdirs.user_cache_dir("gapwatch")) / "spool"
        self._spool = Spool(Path(spool_root), run)
        self._target = Target(run, store, dict(project=project, config=config or {}, reference=reference,
                                               tokens_per_step=tokens_per_step, source=source),
                              self.settings.statement_timeout_s)
        self._outage = Outage(run, _store_name(store), str(self._spool.dir))
        # Each metric call is three items here (step, values, wall time), not a tuple: ints, floats
        # and a dict of numbers are objects the garbage collector does not follow, so a queue of
        # many thousand calls adds nothing to a collection on the training thread.
        self._queue: collections.deque = collections.deque()
        self._events: collections.deque = collections.deque()  # (step, kind and payload, wall time)
        self._dropping = threading.Lock()  # a full queue's drop and the writer's take, one at a time
        self._held: list[tuple[dict, int]] = []  # batches the spool's disk refused, kept in memory
        # Calls taken from the queue, as (columns, events, entries): held here until written.
        self._backlog: collections.deque = collections.deque()
        self._backlog_rows = 0
        self._row_width = 1  # metrics per call in the last part taken, to size the next
        self._rate = START_RATE  # rows a second the store takes, measured
        self._spool_progress: dict = {}  # how far the replay got in each spool file
        self._replay_left = False  # the last job stopped its replay at its budget
        self._last_progress = 0.0  # when the store last answered a write of logged rows
        self._spool_refused = False
        self._cv = threading.Condition()  # guards the counts flush() waits on
        self._wake = threading.Event()
        self._enqueued = 0
        self._handled = 0  # entries now in the store or the spool
        self._flush_wanted = False
        self._closed = False
        self._closing = False
        self._close_started = math.inf
        self._final_status: Any = None
        self._final_sent = False
        self._store = None
        self._left_behind: list = []
        self._batches = 0  # batch ids, so a replay can skip a batch it knows went through
        self._confirmed: set[int] = set()
        self._next_retry = 0.0
        self._next_tick = time.monotonic() + self.settings.flush_interval_s
        # Connect now, for a bounded time: a healthy store knows the run, and this process its
        # attempt, before the first step; a hung one costs the trainer write_timeout_s once.
        self._job = self._start_job(None, 0)
        if self._job.done.wait(self.settings.write_timeout_s):
            self._settle(self._job)
        if self.settings.freeze_gc:
            _freeze_setup_once()
        self._thread = threading.Thread(target=self._loop, name=f"gapwatch-writer-{run}", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        self._prev_sigterm = None
        if self.settings.handle_sigterm and threading.current_thread() is threading.main_thread():
            self._prev_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    # --- the hot path ------------------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Queue metrics for `step`, each value as it is now (log_call.py): Python and NumPy
        numbers, 0-d arrays and CPU tensors are read here; CUDA tensors and JAX arrays start their
        copy to the host here and are read on the writer thread, with no device sync here.
        A bad key, step or value (not one number) raises InvalidLogError here (or, with
        on_invalid="warn", is dropped with a warning); nothing of a rejected call is kept."""
        if self._closed:
            raise RuntimeError(f"Monitor for run {self.run!r} is closed")
        checked = self._checks.step(step)
        if checked is None:
            return
        metrics = self._checks.metrics(checked, snapshot(metrics, self._checks.refuse_value))
        if metrics:
            if len(self._queue) >= 3 * self.settings.max_queue:
                self._drop_oldest()
            self._queue.extend((checked, metrics, time.time()))  # one C call: never half a call queued
            self._enqueued += 1

    def event(self, kind: str | EventKind, step: int, **payload: Any) -> None:
        if self._closed:
            raise RuntimeError(f"Monitor for run {self.run!r} is closed")
        checked = self._checks.step(step)
        if checked is None:
            return
        kind = kind.value if isinstance(kind, EventKind) else str(kind)
        self._events.append({"step": checked, "kind": kind, "payload": payload, "wall_time": time.time()})
        self._enqueued += 1

    def _drop_oldest(self) -> None:
        with self._dropping:
            for _ in range(3):
                self._queue.popleft()
        self._count(1)  # given up, so flush() does not wait for it
        log.warning("gapwatch queue full: dropped the oldest entry")

    # --- lifecycle -----------------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Make everything logged so far durable, in the store or the spool; True when it is.
        Returns within `timeout` (default settings.flush_timeout_s), whatever the store does."""
        timeout = self.settings.flush_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cv:
            target = self._enqueued
            self._flush_wanted = True
        self._wake.set()
        with self._cv:
            while self._handled < target and self._thread.is_alive():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cv.wait(min(remaining, 0.5))
        if self._handled < target:  # the writer is gone (interpreter shutdown): spool it here
            self._save_rest()
        return self._handled >= target

    def close(self, status: str | RunStatus | None = None) -> None:
        """Write what is queued, set the run's status and let go of the store, within
        settings.close_timeout_s; what the store would not take by then stays in the spool."""
        if self._closed:
            return
        self._closed = True
        self._final_status = status
        self._close_started = time.monotonic()
        self._closing = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            while self._thread.is_alive() and (left := self._close_by() - time.monotonic()) > 0:
                self._thread.join(timeout=min(left, 0.1))
        if self._thread.is_alive():
            self._save_rest()
        if self._thread.is_alive() or self._spool.holds_own():
            log.warning("gapwatch: run %r closed after %.1f s with the store still busy; what it had "
                        "not taken is in the spool %s", self.run, time.monotonic() - self._close_started,
                        self._spool.dir)
        if self._prev_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._prev_sigterm)
        atexit.unregister(self.close)

    def _close_by(self) -> float:
        """close() waits close_timeout_s past the later of its call and the store's last answer to
        a write of logged rows, and at most close_drain_s in all: a backlog the store is taking is
        written, a spool that waited out an outage is left to the next process."""
        job = self._job
        progressed = _writes_rows(job) and job.progress_at > job.started  # a write, not just a start
        progress = max(self._last_progress, job.progress_at if progressed else 0.0)
        return min(self._close_started + self.settings.close_drain_s,
                   max(self._close_started, progress) + self.settings.close_timeout_s)

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
        while True:
            try:
                if self._cycle():
                    self._spool.drop_written(self._confirmed)
                    self._spool.release()
                    return
            except Exception:  # noqa: BLE001 - the writer must outlive any bug; nothing queued is lost
                log.exception("gapwatch: the writer of run %r hit an unexpected error and carries on", self.run)
                time.sleep(min(1.0, self.settings.flush_interval_s))

    def _cycle(self) -> bool:
        """One turn of the writer; True once closing is done."""
        interval = self.settings.flush_interval_s
        job = self._job
        busy = job is not None and not job.spooled  # a fresh job: wait for it before writing more
        now = time.monotonic()
        # A busy job holds the next write back (its end wakes the writer), so a tick passed
        # meanwhile is no reason to wake.
        until = math.inf if busy else self._next_tick
        if self._queue or self._events:
            until = min(until, now + self._take_every())
        if job is not None:
            until = min(until, self._give_up_at(job))
            if busy and not job.backlog and not self._behind():  # when _watch may spool it
                until = min(until, job.started + self._patience())
        if not (self._flush_wanted or (self._closing and job is None)):
            self._wake.wait(max(0.0, until - now))
        self._wake.clear()
        now = time.monotonic()
        if self._job is not None:
            self._watch(self._job, now)
        if self._flush_wanted and not self._closing:
            self._flush_wanted = False
            self._flush_to_spool()
        if self._job is None or self._job.spooled:
            tick = now >= self._next_tick
            if tick:
                # A fixed grid from the start: a slow write never pushes the next one later.
                self._next_tick += interval * (math.floor((now - self._next_tick) / interval) + 1)
            catching_up = self._job is None and self._store is not None and (
                self._replay_left or self._held_rows() >= self._batch_rows())
            if tick or self._closing or catching_up:
                self._dispatch(now, tick)
        # After the dispatch, which takes only what its batch needs: the store writes that batch
        # while the rest of the queue becomes columns, until the job ends and the next is due (with
        # no job out, a part a turn).
        self._take_queue(until=lambda: self._job is None or self._job.done.is_set())
        return (self._closing and self._final_sent and self._job is None and not self._queue and not self._events
                and not self._backlog)

    def _take_every(self) -> float:
        """How often the writer moves queued calls into columns: often enough that the queue, the
        one thing the training thread's garbage collections walk, stays short."""
        return min(0.1, self.settings.flush_interval_s / 4)

    def _batch_s(self) -> float:
        """The time one write should take: long enough that a write's fixed cost (series marks,
        rollups, chunks) is spread over many rows, short against the deadline that declares the
        store unreachable."""
        return self.settings.write_timeout_s / 10

    def _batch_rows(self) -> int:
        return int(min(MAX_BATCH_ROWS, max(MIN_BATCH_ROWS, self._rate * self._batch_s())))

    def _flush_to_spool(self) -> None:
        """flush(): the spool makes a batch durable in an fsync, a store write can take a while;
        so spool it now and hand it to the store too, which confirms it (a replay then skips it)."""
        batch, entries = self._drain()
        if batch is None:
            return
        self._save(batch, entries)
        saved = not (self._held and self._held[-1][0] is batch)
        if saved and self._job is None and self._store is not None:
            self._job = self._start_job(batch, 0)
            self._job.spooled = True

    def _patience(self) -> float:
        """How long a batch may sit in a store job before it is spooled too: half an interval, so
        what a SIGKILL can lose stays near one interval even when the store freezes mid-write."""
        return min(self.settings.flush_interval_s / 2, self.settings.write_timeout_s)

    def _give_up_at(self, job) -> float:
        at = job.progress_at + self.settings.write_timeout_s
        if self._closing:
            # Leave time to spool before close() stops waiting.
            at = min(at, self._close_by() - min(0.5, self.settings.close_timeout_s / 4))
        return at

    def _watch(self, job, now: float) -> None:
        if job.done.is_set():
            self._settle(job)
            return
        if not job.spooled and not job.backlog and now >= job.started + self._patience() and not self._behind():
            job.spooled = True
            self._save(job.batch, job.entries)
        if now >= self._give_up_at(job):
            if not job.spooled:  # left behind, its batch must wait in the spool
                job.spooled = True
                self._save(job.batch, job.entries)
            job.abandoned_at = now
            job.abandoned = True
            self._job = None
            self._left_behind.append(job)
            if self._closing:  # slow, not necessarily gone: reconnect and replay it before the rest
                self._store = None
            else:
                self._drop_store(f"no answer in {now - job.progress_at:.1f} s")

    def _settle(self, job) -> None:
        """Take a finished job's outcome: its store and attempt, or its batch into the spool."""
        self._job = None
        if job.attempt is not None and self.attempt is None:
            self.attempt = job.attempt
        if job.rows_written >= MIN_BATCH_ROWS / 2 and job.write_s > 0:  # a small write is mostly fixed cost
            # Down at once, up at most twofold a write: on a shared machine one fast write says
            # little about the next, and a batch too large for the deadline is an outage.
            self._rate = min(job.rows_written / job.write_s, 2 * self._rate)
        self._replay_left = job.spool_left
        if job.error is None:
            if _writes_rows(job):
                self._last_progress = max(self._last_progress, job.progress_at)
            self._store = None if job.final else job.store
            if not job.spooled:
                job.spooled = True
                self._count(job.entries)
            elif job.batch is not None:
                self._confirmed.add(job.batch["id"])
            self._outage.end()
            return
        if not job.spooled:
            job.spooled = True
            self._save(job.batch, job.entries)
        from monitor.store.errors import describe_db_error

        self._drop_store(describe_db_error(job.error))
        if job.final and job.status is not None:
            log.warning("gapwatch: could not set the status of run %r to %s: the store is unreachable",
                        self.run, getattr(job.status, "value", job.status))

    def _dispatch(self, now: float, tick: bool) -> None:
        """Hand a batch to a new store job, or what is queued to the spool while the store is away."""
        if self._job is not None:
            # A slow job is still out: the spool takes what is queued at a trainer's usual pace;
            # a backlog beyond that is the trainer outpacing the store, and waits in memory.
            if not self._behind():
                self._save(*self._drain())
            return
        reachable = self._store is not None
        stuck = self._count_left_behind()
        may_retry = now >= self._next_retry and stuck < MAX_LEFT_BEHIND
        pending = (reachable or may_retry) and self._spool.has_pending()
        if self._closing:
            if self._final_sent:
                self._save(*self._drain())
                return
            if reachable and (pending or self._behind()):
                # Older rows first, then the backlog, a batch at a time: the final job is one
                # bounded write like the others.
                behind = self._behind()
                batch, entries = (None, 0) if pending else self._drain(self._batch_rows())
                self._job = self._start_job(batch, entries, backlog=behind)
                return
            if not reachable and may_retry and pending:
                # A write left while closing (no answer for write_timeout_s): a new connection
                # replays its batch, and the backlog follows as above once the store answers.
                self._job = self._start_job(None, 0)
                return
            self._final_sent = True
            batch, entries = self._drain()
            if reachable or may_retry:
                self._job = self._start_job(batch, entries, status=self._final_status, final=True)
                return
            self._save(batch, entries)
            if self._final_status is not None:
                log.warning("gapwatch: could not set the status of run %r: the store is unreachable", self.run)
            return
        if not reachable:
            # While the store is away every batch goes straight to the spool: a retry carries
            # none, so a retry that hangs holds nothing a SIGKILL could lose.
            self._save(*self._drain())
            if may_retry:
                self._job = self._start_job(None, 0)
            return
        if pending:
            # Older rows wait in the spool: new ones queue behind them, in the spool at a
            # trainer's usual pace, in memory while the trainer outpaces the store.
            if tick and not self._behind():
                self._save(*self._drain())
            self._job = self._start_job(None, 0)
            return
        self._note_backlog()
        behind = self._behind()
        batch, entries = self._drain(self._batch_rows())
        if batch is not None:
            self._job = self._start_job(batch, entries, backlog=behind)

    def _behind(self) -> bool:
        """The trainer outpaces the store: the backlog behind a job (taken into columns or still
        queued) is in memory anyway, so the job's batch is not spooled for being slow (that would
        only slow the writer further)."""
        return self._held_rows() > self._batch_rows()

    def _held_rows(self) -> int:
        """Metric rows waiting in memory: in columns, and (estimated) still queued."""
        return self._backlog_rows + len(self._queue) // 3 * self._row_width

    def _note_backlog(self) -> None:
        """Backpressure, said once while it lasts: a backlog of more than a few intervals' rows."""
        behind_s = self._held_rows() / self._rate
        if behind_s > 4 * self.settings.flush_interval_s:
            self._outage.behind(self._held_rows(), self._rate)
        elif self._held_rows() <= self._batch_rows():  # what waits fits in the next batch
            self._outage.caught_up()

    def _start_job(self, batch: dict | None, entries: int, status: Any = None, final: bool = False,
                   backlog: bool = False):
        from monitor.client.store_jobs import StoreJob

        rows = self._batch_rows()
        job = StoreJob(target=self._target, spool=self._spool, wake=self._wake, store=self._store,
                       attempt=self.attempt, batch=batch, entries=entries, status=status, final=final,
                       confirmed=self._confirmed, budget_rows=rows, piece_rows=rows, backlog=backlog,
                       spool_progress=self._spool_progress)
        job.start()
        return job

    def _count_left_behind(self) -> int:
        """Jobs still stuck; one that got through after all says the store is back: retry now."""
        if any(j.progress_at > j.abandoned_at for j in self._left_behind):
            self._next_retry = 0.0
        self._confirmed.update(j.batch["id"] for j in self._left_behind if j.written)
        self._left_behind = [j for j in self._left_behind if not j.done.is_set()]
        return len(self._left_behind)

    def _drop_store(self, reason: str) -> None:
        self._store = None
        self._next_retry = time.monotonic() + self.settings.retry_interval_s
        self._outage.begin(reason)

    def _take_queue(self, rows: int | None = None, until=None) -> None:
        """Move the queued calls (all, or about `rows` rows' worth, or until `until()`) into the
        backlog as columns, a bounded part at a time: each conversion holds the interpreter lock
        for its whole length, and a training thread that logs meanwhile waits that long."""
        events = [self._events.popleft() for _ in range(len(self._events))]
        # What is queued now: a trainer that keeps logging must not keep the writer here.
        left = len(self._queue) // 3
        if rows is not None:
            left = min(left, -(-rows // self._row_width))
        while events or left:
            with self._dropping:
                calls = min(left, len(self._queue) // 3, max(1, TAKE_ROWS // self._row_width))
                left = 0 if calls == 0 else left - calls
                taken = [self._queue.popleft() for _ in range(3 * calls)]
            try:
                metrics = MetricColumns.from_queue(taken, _to_float)
            except Exception:
                # Back to the front of the queue, in order: a failure here must not lose them.
                self._queue.extendleft(reversed(taken))
                self._events.extendleft(reversed(events))
                raise
            if calls:
                self._row_width = max(1, len(metrics) // calls)
            self._backlog.append((metrics, events, calls + len(events)))
            self._backlog_rows += len(metrics)
            events = []
            if until is not None and until():
                return

    def _drain(self, limit: int | None = None) -> tuple[dict | None, int]:
        """A batch of the oldest rows held (all, or up to `limit` metric rows) and its entries."""
        self._take_queue(None if limit is None else max(0, limit - self._backlog_rows))
        held, self._held = self._held, []
        parts, events, entries = [], [], 0
        for batch, n in held:
            parts.append(batch["metrics"])
            events += batch["events"]
            entries += n
        rows = sum(len(p) for p in parts)
        while self._backlog and (limit is None or rows < limit):
            cols, evs, n = self._backlog.popleft()
            if limit is not None and len(cols) > limit - rows:
                # Split: the rest keeps its share of the calls, so flush() counts each call once.
                cols, rest = cols.split(limit - rows)
                share = n * len(cols) // (len(cols) + len(rest))
                self._backlog.appendleft((rest, [], n - share))
                n = share
            parts.append(cols)
            events += evs
            entries += n
            rows += len(cols)
            self._backlog_rows -= len(cols)
        if not parts and not events and not entries:
            return None, 0
        self._batches += 1
        metrics = MetricColumns.concat(parts)
        return {"id": self._batches, "attempt": self.attempt, "metrics": metrics, "events": events}, entries

    def _save(self, batch: dict | None, entries: int) -> None:
        """Into the spool, fsynced; if the disk refuses, keep it in memory and try again later."""
        if batch is None:
            return
        from monitor.client.store_jobs import spool_form

        try:
            self._spool.append(spool_form(batch))
        except OSError as exc:
            self._held.append((batch, entries))
            if not self._spool_refused:
                self._spool_refused = True
                log.warning("gapwatch: cannot write the spool %s (%s); run %r keeps its rows in memory",
                            self._spool.dir, exc, self.run)
            return
        self._spool_refused = False
        self._count(entries)

    def _save_rest(self) -> None:
        """close() or flush() without a writer: spool what is queued and the job's batch."""
        job = self._job
        if job is not None and not job.spooled:
            job.spooled = True
            self._save(job.batch, job.entries)
        self._save(*self._drain())

    def _count(self, entries: int) -> None:
        if entries:
            with self._cv:
                self._handled += entries
                self._cv.notify_all()


def _writes_rows(job) -> bool:
    """The job writes rows this process logged (a replay writes what an earlier outage left)."""
    return job is not None and job.batch is not None


def _to_float(value: Any) -> float:
    """The writer's conversion of a value that is not a plain number: a JAX array is fetched from
    the device here. A value that is not a number is stored as NaN (and said), never dropped silently; a value
    whose conversion fails in any other way (a device error) too, so the writer carries on."""
    try:
        return float(value)
    except (TypeError, ValueError):
        log.warning("gapwatch: %r is not a number; stored as NaN", value)
    except Exception as exc:  # noqa: BLE001 - a device fetch may raise anything
        log.warning("gapwatch: could not fetch a value (%s); stored as NaN", exc)
    return math.nan


def _store_name(store: Any) -> str:
    """The store as a person would name it, password hidden."""
    from monitor.store import Store, resolve

    if isinstance(store, Store):
        return store.url.redacted()
    try:
        return resolve(store).redacted()
    except Exception:  # noqa: BLE001 - a bad URL is reported when connecting; this is only a name
        return str(store)
