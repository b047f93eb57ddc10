"""Memory settings for the commands that hold whole runs in memory (detect, report): the C
allocator's and the garbage collector's.

Judging a 1.4M-step run makes thousands of column-sized NumPy temporaries (11 MB each), freed as
soon as they are used. glibc's malloc hands each one to the kernel when it is freed (it maps an
allocation that large on its own, and trims the top of its heap past 128 KB free), so the next
one comes back as fresh pages that fault in and are zeroed again: most of the system time of a
`gapwatch report` of a pair that size (bench/RESULTS.md has the figures). Keeping freed memory in
the process for reuse raises the peak a little. Not for long-lived servers (the dashboard, the
watch service), which should give memory back after a burst.
"""

from __future__ import annotations

import ctypes
import gc
import sys

# Container objects allocated between two young-generation collections (CPython's default: 700).
# Building a report's tables and figures makes hundreds of thousands of short-lived dicts and
# lists, and each collection they trigger walks what is alive; none of them are cycles to free.
GC_YOUNG_THRESHOLD = 50_000

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Allocations up to this size come from the heap (a run's frame of dense columns included) ...
MMAP_THRESHOLD_BYTES = 256 << 20
# ... and free memory at the heap's top is kept until this much of it piles up.
TRIM_THRESHOLD_BYTES = 1 << 30


# An import's: a chunk's arrays (a few MB each) come from the heap and go back to it; the import
# bounds how far the heap grows (monitor/importers/freed_memory.py).
IMPORT_HEAP_BYTES = 16 << 20


def keep_freed_memory(mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES) -> None:
    """Have glibc's malloc reuse freed memory rather than return it to the kernel at once: blocks
    up to `mmap_threshold` come from the heap, and its top is trimmed past `trim_threshold` free.
    Does nothing where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
    mallopt(_M_TRIM_THRESHOLD, trim_threshold)


def collect_less() -> None:
    """Run the cyclic garbage collector less often: a batch command's objects are freed by their
    reference counts, and a collection every 700 allocations costs a 1.4M-step report about a
    tenth of its time (bench/RESULTS.md, "Design measurements"). Cycles are still collected."""
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 100)
