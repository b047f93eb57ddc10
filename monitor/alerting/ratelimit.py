"""A token bucket per sink: short bursts go out at once, a storm is spread out at the sink's rate.

Throttled notifications stay in the outbox and go later; nothing is dropped. The bucket lives in
memory: a restarted service begins with a full bucket, which at worst sends one extra burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate_per_minute: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_minute <= 0 or burst < 1:
            raise ValueError("a rate limit needs rate_per_minute > 0 and burst >= 1")
        self.rate_per_s = rate_per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now

    def take(self) -> bool:
        """Spend one token if there is one."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
