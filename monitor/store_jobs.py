"""One store operation of the logging client, on a thread of its own, so the writer can leave it.

TCP keepalives, tcp_user_timeout and statement_timeout bound what they can see, but not a path
that freezes with its sockets open (a proxy or a stuck NAT: the kernel keeps acknowledging, the
server never sees the query). So the writer keeps its own deadline: it waits on a job only while
the job makes progress, then spools the job's batch and leaves the job behind. Writes are
idempotent, so a left-behind job that finishes after the thaw and the replay of its batch store
each row once. A job that is left behind stops before its next write.

A job connects (when it has no store), replays the spool, writes its batch and, last, sets the
run's status. A batch the store refuses for what it holds (not for being unreachable) is
quarantined, so it can never block the batches behind it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from monitor.errors import GapwatchError
from monitor.spool import Spool
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
    replayed: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"gapwatch-store-{self.target.run}", daemon=True).start()

    def _check(self) -> None:
        if self.abandoned:
            raise Abandoned()

    def _progress(self) -> None:
        self.progress_at = time.monotonic()

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
        """Replay the spool, oldest first; those of dead processes before this process takes an
        attempt number, since theirs were earlier."""
        self._check()
        self.spool.seal()
        foreign_attempts: dict[str, int] = {}
        for path in self.spool.pending():
            own = self.spool.is_own(path)
            if own and self.attempt is None:
                self.attempt = self.store.new_attempt(self.target.run)
            batches, bad = Spool.read(path)
            if own:
                # A slow write whose batch was spooled as well and then went through.
                batches = [b for b in batches if b.get("id") not in self.confirmed]
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
            mine = self.batch.get("id") if self.batch is not None else None
            for group in _groups(batches):
                self._check()
                self._write_group(group)
                # flush() spools a batch and hands it to a job: written here, not again below.
                if mine is not None and any(b.get("id") == mine for b in group):
                    self.written = True
            for line in bad:
                kept = self.spool.quarantine({"run": self.target.run, "error": "not a batch", "line": line})
                log.warning("gapwatch: a damaged line in the spool %s of run %r was moved to %s",
                            path, self.target.run, kept)
            path.unlink(missing_ok=True)
            self.replayed += 1

    def _write_group(self, group: list[dict]) -> None:
        """Several spooled batches as one write (a replay after a long outage is thousands of
        small batches); if the store refuses the whole, each alone, so only a bad one is kept out."""
        if len(group) == 1:
            self._write_or_quarantine(group[0], group[0]["attempt"])
            return
        merged = {"attempt": group[0]["attempt"], "metrics": [r for b in group for r in b.get("metrics", [])],
                  "events": [e for b in group for e in b.get("events", [])]}
        try:
            write_batch(self.store, self.target.run, merged, merged["attempt"])
            self._progress()
        except Exception as exc:  # noqa: BLE001 - sorted into "retry later" and "one of them is bad"
            if is_unreachable(exc):
                raise
            for batch in group:
                self._check()
                self._write_or_quarantine(batch, batch["attempt"])

    def _write_or_quarantine(self, batch: dict, attempt: int) -> None:
        try:
            write_batch(self.store, self.target.run, batch, attempt)
        except Exception as exc:  # noqa: BLE001 - sorted into "retry later" and "never"
            if is_unreachable(exc):
                raise
            reason = describe_db_error(exc)
            kept = self.spool.quarantine({"run": self.target.run, "error": reason, "batch": batch})
            steps = [row[0] for row in batch.get("metrics", [])] or [e["step"] for e in batch.get("events", [])]
            span = f"steps {min(steps)}..{max(steps)}" if steps else "no steps"
            log.warning("gapwatch: the store refused a batch of run %r (%s) and always will: %s; "
                        "kept in %s", self.target.run, span, reason, kept)
        self._progress()


def write_batch(store: Store, run: str, batch: dict, attempt: int) -> None:
    """One batch, all or nothing: metric rows [step, key, value, wall_time] and events."""
    with store.atomic():
        if batch.get("metrics"):
            frame = pd.DataFrame(batch["metrics"], columns=["step", "key", "value", "wall_time"])
            frame["attempt"] = attempt
            store.write_metrics(run, frame)
        if batch.get("events"):
            store.write_events(run, [dict(e, attempt=attempt) for e in batch["events"]])


# Rows in one replayed write: large enough that a long outage replays in seconds, small enough
# that one write stays well inside the writer's patience.
REPLAY_GROUP_ROWS = 20_000


def _groups(batches: list[dict]) -> list[list[dict]]:
    """Consecutive batches of one attempt, up to REPLAY_GROUP_ROWS rows a group."""
    groups: list[list[dict]] = []
    rows = 0
    for batch in batches:
        n = len(batch.get("metrics", [])) + len(batch.get("events", []))
        if groups and groups[-1][0]["attempt"] == batch["attempt"] and rows + n <= REPLAY_GROUP_ROWS:
            groups[-1].append(batch)
            rows += n
        else:
            groups.append([batch])
            rows = n
    return groups


def _is_connect_error(exc: BaseException) -> bool:
    return isinstance(exc, GapwatchError) and str(exc).startswith("cannot open store")
