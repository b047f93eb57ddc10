"""One odd series costs its own panel or cell, never the page.

A run's data can be shaped in ways no chart expected (a token count that does not grow, a metric
logged only as NaN, a key with one point). Each part of a page is computed through `contained`:
when it fails, the part shows one line saying why and the server log keeps the traceback, while
the rest of the page draws. An unreachable store is not one part's problem: it propagates, and
the page says so as a whole (callbacks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from monitor.store import DatabaseError

log = logging.getLogger(__name__)
T = TypeVar("T")


def one_line(exc: BaseException) -> str:
    """The first line of an error's message, or its type when it has none."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def contained(what: str, compute: Callable[[], T]) -> tuple[T | None, str | None]:
    """(compute(), None), or (None, "<what>: <why>") when it raised."""
    try:
        return compute(), None
    except DatabaseError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever one part raises, the page must still draw
        log.exception("dashboard: %s failed", what)
        return None, f"{what}: {one_line(exc)}"
