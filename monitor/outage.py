"""One warning when the store stops answering and one when it answers again, never one per retry.

A store down for an hour is retried every few seconds; a warning per retry would bury the one line
a person needs: which store, since when, where the rows wait, and when it was over.
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
