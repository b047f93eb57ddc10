"""Judge one run in a second process while this one judges another: the report judges the run
against its reference and the reference on its own, two passes that share nothing, and on a
machine with a free core the second costs no wall-clock time.

The child is forked, so it reads the run already in memory (a 1.4M-step run pickled to a child
would cost more than judging it) and sends back only the result. Where fork is not available, on
one core, or if the child dies, the pass runs here instead: the result is the same either way.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

_TASK: Callable[[], object] | None = None
"""The pass a forked child runs: set just before the fork, read only by the child."""


def _free_cores() -> int:
    """Cores this process may run on (its affinity, as `taskset` or a container sets it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _run_task() -> object:
    assert _TASK is not None
    return _TASK()


class SidePass:
    """`task()` started in a forked child now (when it can be), its result collected by `result()`."""

    def __init__(self, task: Callable[[], object]) -> None:
        global _TASK
        self._task = task
        self._future: Future | None = None
        self._pool: ProcessPoolExecutor | None = None
        if _free_cores() < 2 or "fork" not in multiprocessing.get_all_start_methods():
            return
        _TASK = task
        try:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
            self._future = self._pool.submit(_run_task)
        except OSError:
            self._shutdown()
        finally:
            _TASK = None

    def result(self) -> object:
        """The task's result: the child's, or, if it could not run there, computed here."""
        try:
            if self._future is not None:
                return self._future.result()
        except (BrokenProcessPool, OSError, EOFError):
            pass  # the child died (out of memory, a signal): judge here instead
        finally:
            self._shutdown()
        return self._task()

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
