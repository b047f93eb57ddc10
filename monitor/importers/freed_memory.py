"""Bounding what a streamed import keeps of the memory its chunks freed.

glibc's malloc hands a large block back to the system when it is freed and trims its heap, so
each chunk's arrays come back as fresh pages that the kernel faults in and zeroes again: with
malloc told to keep such blocks (`app.heap.keep_freed_memory`), a long import spends far less
time in the kernel (bench/RESULTS.md). Kept blocks rarely fit the next chunk's sizes, though, so the heap
grows with the file; past a bound on that growth the free memory goes back to the system
(`malloc_trim`) and the heap starts again. Where the C library has no `malloc_trim` (macOS, musl)
this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# How far an import's resident memory may grow over where it began before freed memory is handed
# back: the import's memory budget (issue 27) less the modules it loads, with room left above the
# bound for the work of one chunk (bench/RESULTS.md has the peaks).
GROWTH_BYTES = 160 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


_TRIM = _malloc_trim()


def _resident() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class HeldMemory:
    """Freed memory of one import, kept while the process stays within GROWTH_BYTES of the
    resident size it had when the import began."""

    def __init__(self, growth: int = GROWTH_BYTES) -> None:
        start = _resident()
        self._limit = None if start is None else start + growth

    def settle(self) -> None:
        """After a chunk: hand free memory back if the process grew past its bound (or if its
        size cannot be read)."""
        if _TRIM is None:
            return
        now = _resident()
        if self._limit is None or now is None or now > self._limit:
            _TRIM(0)
