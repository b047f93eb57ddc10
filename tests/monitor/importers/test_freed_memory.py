"""An import keeps the memory its chunks freed for the next chunks, until the process has grown
past its bound; then it hands it back. Checked in a fresh process: the allocator's settings hold
for the rest of a process's life."""

from __future__ import annotations

import subprocess
import sys

# Blocks of a chunk's size, every other one freed: holes in the heap that it cannot trim from its
# top, as a chunk's arrays leave them between the rows held for the next chunk.
SCRIPT = """
import sys
import numpy as np
from app.heap import keep_freed_memory
from monitor.importers.freed_memory import HeldMemory
keep_freed_memory(16 << 20, 16 << 20)
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6
held = HeldMemory(growth=int(sys.argv[1]) << 20)
blocks = [np.ones(500_000) for _ in range(40)]  # 160 MB
for i in range(0, 40, 2):
    blocks[i] = None
before = rss_mb()
held.settle()
print(before, rss_mb())
"""


def test_freed_memory_goes_back_only_past_the_bound():
    def before_and_after(growth_mb: int) -> tuple[float, float]:
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(growth_mb)], capture_output=True, text=True,
                              check=True, timeout=60)
        before, after = map(float, done.stdout.split())
        return before, after

    kept_before, kept_after = before_and_after(1024)
    assert kept_after > kept_before - 10  # within the bound: 80 MB of holes kept for reuse
    given_before, given_after = before_and_after(32)
    assert given_after < given_before - 60  # past it: handed back
