"""What `Monitor.log` checks on the caller's thread, before anything is queued.

A bad key or step is the caller's mistake and must be said where it was made, at once: once it is
queued, the writer can only find it seconds later, far from the line that caused it. The checks
cost a set and a dict lookup per key; a value that is not one number (log_values.py) is refused
the same way.
"""

from __future__ import annotations

import logging
import math
import numbers
import operator
from typing import Any

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP, is_valid_key

log = logging.getLogger("gapwatch.client")
MAX_SHOWN = 80  # characters of a refused value shown in its message


class InvalidLogError(GapwatchError, ValueError):
    """A key or step `log()` cannot accept: raised on the caller's thread, nothing of it queued."""


class LogChecks:
    def __init__(self, run: str, on_invalid: str = "raise") -> None:
        if on_invalid not in ("raise", "warn"):
            raise ValueError(f"on_invalid must be 'raise' or 'warn', not {on_invalid!r}")
        if not isinstance(run, str) or not run.strip() or len(run) > 255:
            raise InvalidLogError(f"gapwatch: run name {run!r} must have 1 to 255 characters, not all blank")
        self.run = run
        self.raise_errors = on_invalid == "raise"
        self._valid_keys: set[str] = set()
        self._last_step: dict[str, int] = {}
        self._warned: set[str] = set()

    def step(self, step: Any) -> int | None:
        """The step as an int; None (with a warning) when it is bad and bad input is dropped."""
        if type(step) is int and 0 <= step <= MAX_STEP:
            return step
        problem = _step_problem(step)
        if problem is None:
            return int(step)
        self._reject(f"step {step!r} {problem}", f"step:{problem}")
        return None

    def metrics(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        """The metrics to queue: all of them, or (when dropping) those with a good key whose
        series does not go back in time. A series' steps never decrease within one process."""
        last = self._last_step
        bad: list[str] = []
        for key in metrics:
            if key not in self._valid_keys:
                if isinstance(key, str) and is_valid_key(key):
                    self._valid_keys.add(key)
                else:
                    self._reject(
                        f"metric key {key!r} is not of the form namespace/name in lower snake case "
                        "(like train/loss)", f"key:{key!r}")
                    bad.append(key)
                    continue
            previous = last.get(key)
            if previous is not None and step < previous:
                self._reject(f"step {step} of {key!r} comes after step {previous}: a series' steps "
                             "never go back within one process (a restart is a new Monitor)",
                             f"backwards:{key}")
                bad.append(key)
        # `metrics` is log_values.snapshot's own dict, never the caller's: no copy needed.
        kept = metrics if not bad else {k: v for k, v in metrics.items() if k not in bad}
        for key in kept:
            last[key] = step
        return kept

    def refuse_value(self, key: Any, value: Any, why: str) -> None:
        """A value that is not one number (log_values.py), refused like a bad key."""
        self._reject(f"the value {_shown(value)} of {_shown(key)} {why}", f"value:{_shown(key)}")

    def _reject(self, problem: str, what: str) -> None:
        message = f"gapwatch run {self.run!r}: {problem}"
        if self.raise_errors:
            raise InvalidLogError(message)
        if what not in self._warned:
            self._warned.add(what)
            log.warning("%s; dropped (said once)", message)


def _step_problem(step: Any) -> str | None:
    """Why `step` is not a step, or None when int(step) is one."""
    if isinstance(step, bool):
        return "is a bool, not an integer"
    if isinstance(step, numbers.Integral):
        value = int(step)
    elif isinstance(step, numbers.Real):
        as_float = float(step)
        if not math.isfinite(as_float):
            return "is not finite"
        if not as_float.is_integer():
            return "is not an integer"
        value = int(as_float)
    else:
        try:
            value = operator.index(step)
        except TypeError:
            return "is not an integer"
    if value < 0:
        return "is negative"
    if value > MAX_STEP:
        return f"is beyond the largest step the store keeps ({MAX_STEP})"
    return None


def _shown(value: Any) -> str:
    """repr(value), cut short: a refused value may be a megabyte of text."""
    try:
        shown = repr(value)
    except ValueError:  # an integer of more digits than Python will print
        return f"<{type(value).__name__} too long to show>"
    return shown if len(shown) <= MAX_SHOWN else shown[:MAX_SHOWN] + "..."
