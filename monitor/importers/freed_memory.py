"""Handing back to the system the memory a chunk of an import freed, so that the import's peak
stays that of a chunk.

glibc's malloc keeps freed blocks in its heap for reuse, and a streamed import frees a block of
parsed text, its columns and a chunk's row arrays at every chunk, in sizes that rarely fit the
next ones: a 100-column W&B export's import grew to about 100 MB more than with `malloc_trim`
after each chunk (bench/RESULTS.md). Where the C library has no `malloc_trim` (macOS, musl) this
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


_TRIM = _malloc_trim()


def release() -> None:
    """Return the heap's free memory to the system (a few milliseconds at most)."""
    if _TRIM is not None:
        _TRIM(0)
