"""One warning when the store stops answering and one when it answers again, never one per retry.

A store down for an hour is retried every few seconds; a warning per retry would bury the one line
a person needs: which store, since when, where the rows wait, and when it was over. A store that
answers, only slower than the trainer logs, is backpressure, not an outage: said once too, with
the backlog and the store's speed, and once when the writer has caught up.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("gapwatch.client")


class Outage:
    def __init__(self, run: str, store_name: str, spool_dir: str) -> None:
        self.run = run
        self.store_name = store_name
        self.spool_dir = spool_dir
        self._since: float | None = None
        self._behind_since: float | None = None

    @property
    def active(self) -> bool:
        return self._since is not None

    def begin(self, reason: str) -> None:
        if self._since is not None:
            log.debug("gapwatch: store %s still unreachable: %s", self.store_name, reason)
            return
        self._since = time.monotonic()
        log.warning("gapwatch: store %s unreachable (%s); run %r logs to the spool in %s until it is back",
                    self.store_name, reason, self.run, self.spool_dir)

    def end(self) -> None:
        if self._since is None:
            return
        lasted = time.monotonic() - self._since
        self._since = None
        log.warning("gapwatch: store %s reachable again after %.1f s; run %r's spool is replayed",
                    self.store_name, lasted, self.run)

    def behind(self, rows: int, rate: float) -> None:
        if self._behind_since is not None:
            return
        self._behind_since = time.monotonic()
        log.warning("gapwatch: run %r logs faster than store %s writes (about %.0f rows/s): %d rows wait "
                    "in memory and are written batch after batch (backpressure, not an outage)",
                    self.run, self.store_name, rate, rows)

    def caught_up(self) -> None:
        if self._behind_since is None:
            return
        lasted = time.monotonic() - self._behind_since
        self._behind_since = None
        log.warning("gapwatch: run %r's writer caught up with its backlog after %.1f s", self.run, lasted)
