"""When to try a failed notification again: exponential backoff, and the receiver's Retry-After.

slack_sdk's RateLimitErrorRetryHandler does `int(header)`, which raises ValueError on a fractional
Retry-After such as `0.5`; it also sleeps inside `send()`. We parse the header ourselves (seconds,
fractional or not, or an HTTP date) and wait in the outbox instead, where a restart keeps the wait.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from email.utils import parsedate_to_datetime


def retry_delay(tries: int, base_s: float, cap_s: float, rand: Callable[[], float] = random.random) -> float:
    """Seconds before try number `tries + 1`: base·2^(tries-1), capped, times a jitter in [0.5, 1]
    so many notifications failing together do not all return in the same instant."""
    exponent = min(max(tries - 1, 0), 60)
    return min(cap_s, base_s * 2.0**exponent) * (0.5 + 0.5 * rand())


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header: `2`, `0.5` and HTTP dates all work; a value in
    the past means 0; an unreadable or missing header gives None."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(text).timestamp() - now
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
