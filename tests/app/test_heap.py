"""detect and report keep freed memory for reuse (app/heap.py): checked in a fresh process, since
the setting holds for the rest of a process's life."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# The script prints its resident memory after a large array is filled and freed: glibc maps an
# allocation that large on its own and unmaps it on free, unless told to keep it.
SCRIPT = """
import sys
import numpy as np
if sys.argv[1] == "keep":
    from app.heap import keep_freed_memory
    keep_freed_memory()
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6
a = np.ones(25_000_000)
del a
print(rss_mb())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")
def test_freed_memory_stays_for_reuse_only_when_asked():
    def rss_after_free(mode: str) -> float:
        done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
        return float(done.stdout.strip())

    assert rss_after_free("keep") > rss_after_free("default") + 150


def test_the_collector_runs_less_often_but_still_frees_cycles():
    script = """
import gc, weakref
from app.heap import GC_YOUNG_THRESHOLD, collect_less
gc.collect()
collect_less()
class Node: pass
a = Node(); a.me = a  # a cycle: only the collector frees it
alive = weakref.ref(a)
del a
junk = [[i] for i in range(GC_YOUNG_THRESHOLD // 2)]  # far past CPython's 700
after_some = alive() is not None
junk += [[i] for i in range(2 * GC_YOUNG_THRESHOLD)]
print(gc.isenabled(), after_some, alive() is None)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "True"], "kept past 700 allocations, freed after the new threshold"
