"""The watch service: poll the store, judge new rows incrementally, turn detections into alerts, and
deliver the outbox, until stopped. It follows the runs a `TargetSpec` names, or every run in the store.

Two threads. The watch loop polls every `poll_interval_s`; for each run with new rows it runs the
detectors, applies the incident logic, and writes alerts, notifications, detections and detector
state in one transaction. The delivery loop sends what the outbox holds; it is woken as soon as
something is queued, so a slow or dead Slack never delays detection and a flagged step reaches the
sink within about one poll interval.

Several services (`gapwatch watch --all` on several hosts) share the runs of one PostgreSQL store
through leases (monitor/store/leases.py): each poll a worker renews its leases, gives back runs
beyond its fair share and takes free or expired ones, and judges only the runs it holds; recording
a run's verdicts renews its lease in the same transaction, so a run is judged by one worker at a
time and a dead worker's runs are taken over within one lease. Every worker delivers the outbox;
each notification is claimed by one of them before it is sent. A SQLite store takes one worker.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from monitor.alerting.incidents import ChangeKind, IncidentTracker
from monitor.alerting.ledger import AlertLedger
from monitor.alerting.outbox import Outbox
from monitor.alerting.sinks import Sink, build_sinks
from monitor.judging.engine import DetectionEngine
from monitor.judging.judge import own_reference
from monitor.errors import GapwatchError
from monitor.schema import RunInfo
from monitor.store import DatabaseError, LeaseLost, RunMarks, describe_db_error
from monitor.watch.config import WatchConfig
from monitor.watch.references import SharedReferences
from monitor.watch.run_watcher import RunWatcher

log = logging.getLogger("gapwatch.watch")

# With `--all`, or while a watched run's reference is not in the store, the targets are read again
# every this many polls: one small query, so a new run (or the reference, once imported) is judged
# from the first poll after it appears.
TARGET_REFRESH_POLLS = 1
# Seconds the service waits for the delivery thread to finish its current send when stopping
# (a little more than one HTTP timeout is enough; it is a daemon thread after that).
STOP_JOIN_EXTRA_S = 2.0
# `--once`: how long notifications held back by a sink's rate limit may take to go out, and how
# often to try (a burst of alerts on a console or Slack at one a second fits in half a minute).
ONCE_DRAIN_S = 30.0
ONCE_DRAIN_POLL_S = 0.25



# --- which runs the service follows: named ones, or every run in the store ------------------------
@dataclass(frozen=True)
class Target:
    run: str
    reference: str | None
    missing_reference: str | None = None
    """The run's recorded reference when no run of that name is in the store: the run is judged
    without it (by the detectors that need none) until it is imported."""


@dataclass
class TargetSpec:
    runs: tuple[str, ...] = ()
    """Runs named on the command line (empty with `all_runs`)."""
    reference: str | None = None
    """Reference for the named runs; None: each run's own stored reference."""
    all_runs: bool = False
    """Every run in the store, found anew as runs appear. A run without a reference (an imported
    reference among them), or whose reference is not in the store, is judged by the detectors that
    need none: spikes, NaN, data, resumes, throughput."""

    def resolve(self, store) -> list[Target]:
        if self.all_runs:
            pairs = [(name, _none(ref)) for name, ref in store.run_references()]
            names = {name for name, _ in pairs}
            return [Target(name, ref) if ref is None or ref in names else Target(name, None, missing_reference=ref)
                    for name, ref in pairs]
        targets = []
        for run in self.runs:
            info = store.get_run(run)
            if info is None:
                raise GapwatchError(f"no run named {run!r} in {store.url.redacted()}")
            if self.reference == run:
                raise GapwatchError(own_reference(run))
            if self.reference is not None and store.get_run(self.reference) is None:
                # Named on the command line: a typo, not a reference still to be imported.
                raise GapwatchError(f"reference run {self.reference!r} of {run!r} is not in {store.url.redacted()}")
            reference = self.reference or _none(info["reference"])
            if reference is not None and store.get_run(reference) is None:
                targets.append(Target(run, None, missing_reference=reference))
            else:
                targets.append(Target(run, reference))
        return targets


def _none(value) -> str | None:
    return value if isinstance(value, str) and value else None


class WatchService:
    def __init__(
        self,
        store,
        config: WatchConfig,
        targets: TargetSpec,
        engine: Callable[[], DetectionEngine] | None = None,
        sinks: dict[str, Sink] | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        worker: str | None = None,
    ) -> None:
        """`worker` names this worker in the store's leases (default: host and process id)."""
        self.store = store
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.config = config
        self.targets = targets
        self.make_engine = engine or (lambda: DetectionEngine(config.detect))
        self.clock = clock
        alerting = config.alerting
        self.ledger = AlertLedger(store, alerting, clock)
        self.tracker = IncidentTracker(alerting.incidents)
        self.outbox = Outbox(store, sinks if sinks is not None else build_sinks(alerting, stream), alerting, clock)
        self.watchers: dict[Target, RunWatcher] = {}
        self.references = SharedReferences(store)
        self.stop_event = threading.Event()
        self._wake_delivery = threading.Event()
        self._polls = 0
        self._current: list[Target] = []
        self._state_saved_at: dict[str, float] = {}
        self._held: set[str] = set()
        self._behind: set[str] = set()
        self.failed: dict[str, str] = {}
        """The runs whose last pass failed, each with why in one line: the service tries them again
        next poll; `gapwatch watch --once` fails naming them."""
        self._once = False
        self._incidents: dict[str, tuple[dict, dict]] = {}
        self._told_single_worker = False

    # --- the watch loop ------------------------------------------------------------------------
    def poll(self) -> int:
        """One pass over every target; returns the notifications queued."""
        # Every run, or a reference still to be imported: the targets are read again as runs appear.
        refresh = self.targets.all_runs or any(t.missing_reference for t in self._current)
        if not self._current or (refresh and self._polls % TARGET_REFRESH_POLLS == 0):
            try:
                self._current = self.targets.resolve(self.store)
            except DatabaseError as exc:
                log.warning("store unavailable (%s); will retry", describe_db_error(exc))
                return 0
            for target in set(self.watchers) - set(self._current):
                self._forget(target)  # its reference changed, appeared or went away: judged anew
        self._polls += 1
        try:
            self._balance()
        except DatabaseError as exc:
            log.warning("store unavailable (%s); will retry", describe_db_error(exc))
            return 0
        try:
            held = [t for t in self._current if t.run in self._held]
            wanted = {t.run for t in held} | {t.reference for t in held if t.reference is not None}
            marks = self.store.runs_marks(sorted(wanted))
            held = [t for t in held if t.run in marks]
            # The infos of the runs with news, in one query (a new watcher reads its own).
            infos = self.store.run_infos([t.run for t in held if t in self.watchers
                                          and self.watchers[t].has_news(marks[t.run])])
        except DatabaseError as exc:
            log.warning("store unavailable (%s); will retry", describe_db_error(exc))
            return 0
        for target in [t for t in self.watchers if t.run not in marks]:
            self._forget(target)  # a run deleted since the targets were read
        queued = 0
        # Runs with a backlog, or whose last pass failed, last: they do not delay the others' verdicts.
        for target in sorted(held, key=lambda t: t.run in self._behind or t.run in self.failed):
            if self.stop_event.is_set():
                break
            self.failed.pop(target.run, None)
            try:
                told = self._poll_target(target, marks[target.run], infos.get(target.run),
                                         marks.get(target.reference) if target.reference is not None else None)
            except LeaseLost as exc:
                log.info("%s", exc)
                self._held.discard(target.run)
                self._forget(target)
                continue
            except DatabaseError as exc:
                # The store went away for a moment: forget in-memory state, resume from what was saved.
                why = f"store unavailable ({describe_db_error(exc)})"
                log.warning("%s: %s%s", target.run, why, self._then())
            except GapwatchError as exc:
                why = str(exc)
                log.warning("%s: %s", target.run, why)
            except Exception as exc:  # noqa: BLE001 - one run's bad data must not stop the watch of the others
                why = _first_line(exc)
                # The traceback stays: an exception here is a bug, and this is its evidence.
                log.exception("%s: judging new rows failed%s", target.run, self._then(" from the saved state"))
            else:
                if told:
                    # Sent while the poll goes on: the other runs' passes do not delay it.
                    self._wake_delivery.set()
                queued += told
                continue
            self.failed[target.run] = why
            self._forget(target)
        return queued

    def _then(self, where: str = "") -> str:
        """What follows a failed pass, for the log: the service tries again; one pass (--once) does not."""
        return "" if self._once else f"; will retry{where}"

    def _watcher(self, target: Target) -> RunWatcher:
        watcher = self.watchers.get(target)
        if watcher is None:
            watcher = RunWatcher(self.store, target.run, target.reference, self.make_engine(),
                                 window_steps=self.config.catch_up_steps, references=self.references)
            self.watchers[target] = watcher
        return watcher

    def _forget(self, target: Target) -> None:
        """Drop a run's in-memory state (its watcher and incidents): read from the store again."""
        self.watchers.pop(target, None)
        self._incidents.pop(target.run, None)

    def _balance(self) -> None:
        """Renew this worker's leases and take its share of the runs; forget the watchers of runs
        another worker judges now (their state is read again from the store if they come back)."""
        if self._polls == 1:
            self._free_dead_local_workers()
        held, other = self.store.leases.balance(self.worker, [t.run for t in self._current], self.config.lease_s)
        if other is not None and not self._told_single_worker:
            log.warning("watch worker %s already watches %s: a SQLite store takes one watch worker, so this one "
                        "waits and takes over if that one stops (several workers need PostgreSQL)",
                        other, self.store.url.redacted())
        self._told_single_worker = other is not None
        self._held = held
        for target in [t for t in self.watchers if t.run not in held]:
            self._forget(target)

    def _free_dead_local_workers(self) -> None:
        """Give back the leases of workers of this host whose process is gone (a worker restarted
        after a crash takes its runs back at once instead of one lease later)."""
        host = socket.gethostname()
        for owner in set(self.store.leases.holders().values()):
            name, _, pid = owner.rpartition(":")
            if name == host and pid.isdigit() and owner != self.worker and not _alive(int(pid)):
                log.info("watch worker %s is gone; its runs are free", owner)
                self.store.leases.release(owner)

    def _fence(self, run: str) -> Callable[[], None]:
        return lambda: self.store.leases.confirm(run, self.worker, self.config.lease_s)

    def _poll_target(self, target: Target, marks: RunMarks, info: RunInfo | None,
                     reference_marks: RunMarks | None) -> int:
        if target.missing_reference is not None and target not in self.watchers:
            log.warning("%s: its reference %r is not in the store; judged by the detectors that need no "
                        "reference until it is", target.run, target.missing_reference)
        watcher = self._watcher(target)
        queued = 0
        deadline = time.monotonic() + self.config.run_budget_s
        self._behind.discard(target.run)
        while True:
            result = watcher.poll(marks, info, reference_marks)
            if result is None:
                break
            now = self.clock()
            # Only this worker writes the alerts of a run it holds, and `apply` brings them up to
            # date in place, so they are read once while it holds the run, not every pass.
            incidents = self._incidents.get(target.run)
            if incidents is None:
                incidents = self._incidents[target.run] = self.ledger.incidents([target.run])
            open_alerts, resolved = incidents
            changes = self.tracker.apply(result.detections, open_alerts, resolved, result.progress, now,
                                         cleans=result.cleans)
            save_state = bool(changes) or result.more or (
                now - self._state_saved_at.get(target.run, 0.0) >= self.config.state_save_interval_s)
            queued += self.ledger.record(changes, state=watcher.state() if save_state else None,
                                         detections=result.detections,
                                         series=(target.run, result.series) if len(result.series) else None,
                                         fence=self._fence(target.run))
            if save_state:
                self._state_saved_at[target.run] = now
            for change in changes:
                level = logging.DEBUG if change.kind == ChangeKind.EXTENDED else logging.INFO
                log.log(level, "%s: incident %s %s (%s: %s on %s, steps %d-%d)", target.run, change.alert.id,
                        change.kind, change.alert.name, change.alert.detector, change.alert.metric,
                        change.alert.start_step, change.alert.end_step)
            if not result.more:
                break
            log.info("%s: catching up, judged up to step %d", target.run, result.window_end)
            if time.monotonic() >= deadline:
                self._behind.add(target.run)
                break
        return queued

    def save_states(self) -> None:
        """Save every watcher's detector state now (on a clean stop), of the runs still held."""
        for target, watcher in self.watchers.items():
            try:
                self.ledger.record([], state=watcher.state(), fence=self._fence(target.run))
            except LeaseLost as exc:
                log.info("%s", exc)

    def release(self) -> None:
        """Give back this worker's leases (a clean stop): other workers take its runs at once."""
        try:
            self.store.leases.release(self.worker)
        except DatabaseError as exc:
            log.warning("could not give back the watch leases on stop (%s); they expire in %.0f s",
                        describe_db_error(exc), self.config.lease_s)

    # --- the delivery loop ---------------------------------------------------------------------
    def watched_runs(self) -> list[str]:
        """The runs the last poll covered."""
        return [t.run for t in self._current]

    def _drain_once(self) -> None:
        """Deliver what one pass found, for the watched runs only: another run's queued
        notifications wait for the service that watches it. The console is one's own terminal, so
        its rate limit (which spreads a storm over a chat channel) does not apply; notifications
        held back by another sink's rate limit go out at its rate, for at most ONCE_DRAIN_S. A
        failing sink keeps its notifications for the next start (the outbox says how many)."""
        runs = self.watched_runs()
        unlimited = frozenset(s.name for s in self.config.alerting.sinks if s.kind == "console")
        deadline = time.monotonic() + ONCE_DRAIN_S
        result = self.outbox.deliver_due(runs, unlimited)
        failed = result.failed
        while result.held and not failed and time.monotonic() < deadline:
            time.sleep(ONCE_DRAIN_POLL_S)
            result = self.outbox.deliver_due(runs, unlimited)
            failed += result.failed

    def _delivery_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.outbox.deliver_due()
                due = self.outbox.seconds_until_due()
            except DatabaseError as exc:
                log.warning("outbox: store unavailable (%s); will retry", describe_db_error(exc))
                due = None
            except Exception:  # noqa: BLE001 - the delivery thread must outlive any one failure
                log.exception("outbox: delivery pass failed; will retry")
                due = None
            wait = self.config.poll_interval_s if due is None else min(max(due, 0.01), self.config.poll_interval_s)
            self._wake_delivery.wait(wait)
            self._wake_delivery.clear()

    # --- running ---------------------------------------------------------------------------------
    def run(self, once: bool = False, max_polls: int | None = None) -> None:
        """Watch until `stop()` (or a signal handler setting `stop_event`), `max_polls` passes, or one
        pass with `once` (which then makes one delivery pass; failures stay queued for next time,
        and the runs that could not be judged are in `failed`)."""
        self._once = once
        if once:
            self.poll()
            while self._behind and not self.stop_event.is_set():  # once means every run caught up
                self.poll()
            self.save_states()
            self.release()
            self._drain_once()
            return
        deliverer = threading.Thread(target=self._delivery_loop, name="gapwatch-delivery", daemon=True)
        deliverer.start()
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                self.poll()
                if max_polls is not None and self._polls >= max_polls:
                    break
                # Polls start every interval (not an interval after the last one ended), so a
                # slow poll does not stretch the time a flagged step waits to be seen.
                self.stop_event.wait(max(0.0, self.config.poll_interval_s - (time.monotonic() - started)))
        finally:
            self.stop_event.set()
            self._wake_delivery.set()
            deliverer.join(self.config.alerting.delivery.timeout_s + STOP_JOIN_EXTRA_S)
            try:
                self.save_states()
            except DatabaseError as exc:
                log.warning("could not save watch state on stop (%s)", describe_db_error(exc))
            self.release()

    def stop(self) -> None:
        self.stop_event.set()
        self._wake_delivery.set()


def _first_line(exc: Exception) -> str:
    """An unexpected exception in one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
