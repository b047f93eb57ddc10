"""Delivery from the outbox table: at least once, in order per alert and sink, never lost.

A pass claims each due notification (a conditional UPDATE that pushes its next try a lease into the
future, so a second delivery loop on the same store skips it), sends it, and marks it delivered. A
failure schedules the next try with exponential backoff, or after the receiver's Retry-After, and
pauses the whole sink until then: one probe at a time reaches a sink that is down, not a flood.

The one window without a guarantee is a crash after the receiver accepted a notification and before
it is marked delivered: the notification is sent again after the lease, with the same idempotency
key, so a receiver that keeps keys drops it. Marking happens right after the response, retried
briefly if the store hiccups, so the window is a few milliseconds wide.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from monitor.alerting.backoff import retry_delay
from monitor.alerting.config import AlertingConfig
from monitor.alerting.ratelimit import TokenBucket
from monitor.alerting.secrets import redact
from monitor.alerting.sinks.base import SendResult, Sink, one_line
from monitor.store import DatabaseError

log = logging.getLogger("gapwatch.alerting.outbox")

# Undelivered rows read per pass, oldest first. Notifications are per incident, so even a long
# outage leaves far fewer pending than this; more simply wait for the next pass.
PENDING_SCAN_LIMIT = 2000
# Tries at marking a sent notification delivered when the store fails for a moment (a PostgreSQL
# failover), with this pause between them; after that the lease decides, and it may be resent.
MARK_TRIES = 5
MARK_PAUSE_S = 0.2


@dataclass
class DeliveryPass:
    sent: int = 0
    failed: int = 0
    held: int = 0
    """Due, but held back by a rate limit or a sink paused after a failure."""


class Outbox:
    def __init__(
        self,
        store,
        sinks: dict[str, Sink],
        config: AlertingConfig,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.sinks = sinks
        self.config = config
        self.delivery = config.delivery
        self.clock = clock
        self.rand = rand
        self.buckets = {s.name: TokenBucket(s.rate_per_minute, s.burst) for s in config.sinks}
        self.paused_until: dict[str, float] = {}
        self._warned_unknown: set[str] = set()

    def deliver_due(self, runs: list[str] | None = None, unlimited: frozenset[str] = frozenset()) -> DeliveryPass:
        """Send every notification that is due now (bounded by the batch size): of these runs' alerts
        only, when `runs` is given; the sinks named in `unlimited` without their rate limit."""
        result = DeliveryPass()
        # (sink, alert) pairs with an older notification still undelivered: the newer ones wait, so
        # a resolution never arrives before its opening.
        blocked: set[tuple[str, int]] = set()
        attempted = 0
        for row in self._pending(runs):
            now = self.clock()
            order_key = (row.sink, row.alert_id)
            if order_key in blocked:
                continue
            blocked.add(order_key)
            sink = self.sinks.get(row.sink)
            if sink is None:
                self._warn_unknown(row.sink)
                continue
            if row.next_try_at > now:
                continue
            if self.paused_until.get(row.sink, 0.0) > now or attempted >= self.delivery.batch_size:
                result.held += 1
                continue
            if row.sink not in unlimited and not self.buckets[row.sink].take():
                result.held += 1
                continue
            if not self._claim(row.id, now):
                continue
            attempted += 1
            outcome = self._send(sink, row)
            if outcome.ok:
                self._mark_delivered(row.id, outcome.message_ref)
                blocked.discard(order_key)
                result.sent += 1
                log.info("delivered %s notification of alert %s to %s", row.kind, row.alert_id, row.sink)
                continue
            result.failed += 1
            tries = row.tries + 1
            if outcome.retry_after_s is not None:
                delay = min(outcome.retry_after_s, self.delivery.max_retry_after_s)
            else:
                delay = retry_delay(tries, self.delivery.backoff_base_s, self.delivery.backoff_max_s, self.rand)
            next_try = self.clock() + delay
            self._mark_failed(row.id, next_try, outcome.error)
            self.paused_until[row.sink] = next_try
            log.warning("%s: %s notification of alert %s not delivered (try %d): %s; next try in %.1f s",
                        row.sink, row.kind, row.alert_id, tries, outcome.error, delay)
        return result

    def _send(self, sink: Sink, row) -> SendResult:
        """A sink's answer; a sink that raises (a bug, a payload it cannot render) counts as a failed
        try, so one bad notification is retried and logged instead of stopping all delivery."""
        try:
            notification = json.loads(row.payload)
            thread = self.store.outbox.message_ref(row.alert_id, row.sink)
            if thread is not None:
                notification["thread"] = json.loads(thread)
            return sink.send(notification)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            secrets = [secret for s in self.config.sinks for secret in (s.url, s.token)]
            return SendResult(ok=False, error=one_line(redact(f"{type(exc).__name__}: {exc}", *secrets)))

    def seconds_until_due(self) -> float | None:
        """Seconds until the earliest undelivered notification of a known sink is due; None if none."""
        earliest = self.store.outbox.earliest_due(list(self.sinks))
        if earliest is None:
            return None
        return max(0.0, earliest - self.clock())

    def pending_count(self, runs: list[str] | None = None) -> int:
        return self.store.outbox.pending_count(runs)

    # --- the table -----------------------------------------------------------------------------
    def _pending(self, runs: list[str] | None = None):
        return self.store.outbox.pending(PENDING_SCAN_LIMIT, runs)

    def _claim(self, row_id: int, now: float) -> bool:
        return self.store.outbox.claim(row_id, now, self.delivery.claim_lease_s)

    def _mark_delivered(self, row_id: int, message_ref: str | None = None) -> None:
        for attempt in range(MARK_TRIES):
            try:
                self.store.outbox.mark_delivered(row_id, self.clock(), message_ref)
                return
            except DatabaseError:
                if attempt == MARK_TRIES - 1:
                    raise
                time.sleep(MARK_PAUSE_S)

    def _mark_failed(self, row_id: int, next_try_at: float, error: str) -> None:
        self.store.outbox.mark_failed(row_id, next_try_at, error)

    def _warn_unknown(self, sink: str) -> None:
        if sink not in self._warned_unknown:
            self._warned_unknown.add(sink)
            log.warning("notifications for sink %r wait in the outbox: no sink of that name is configured", sink)
