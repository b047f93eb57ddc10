"""Reading a Megatron-LM stdout log as long as a long run's, against the straightforward way.

- Parse: `monitor.importers.megatron_log` against the straightforward reader (the text read whole,
  split into lines, each iteration line's fields into a dict, the dicts into one pandas frame),
  each in a child process of its own so that its peak resident memory is its own: CPU seconds and
  the peak MB above what the process held after its imports, best of two.
- Follow: a poll of `import --follow` once the job has appended 1,000 iterations, read on from the
  last whole line (`line_tail.LineTail`) against reading the grown log again from its start.

The log: 500,000 iterations (10 fields a line, as Megatron-LM prints them) with a validation line
every 1,000, about 180 MB.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench.results import record, table

STEPS = 500_000
QUICK_STEPS = 50_000
APPENDED = 1_000

# A reader's child process: its imports first, then the reading, timed, and the peak resident
# memory above what the process held once its imports were done.
CHILD = textwrap.dedent("""
    import os, resource, sys, time
    {setup}
    held = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    start = time.process_time()
    rows = {reader}
    cpu = time.process_time() - start
    print(rows, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - held)
""")
OURS = ("from monitor.importers.megatron_log import parse_megatron_log",
        "len(parse_megatron_log(sys.argv[1]).scalars)")
NAIVE = ("import pandas, re; from bench.bench_line_logs import naive_rows", "naive_rows(sys.argv[1])")


def line(step: int) -> str:
    loss = 2.5 + 8.0 / math.sqrt(step)
    return (f" [2024-05-01 10:00:00] iteration {step:8d}/ {STEPS:8d} | consumed samples: {step * 256:12d} | "
            f"elapsed time per iteration (ms): 512.3 | throughput per GPU (TFLOP/s/GPU): 150.2 | learning rate: "
            f"3.000000E-04 | global batch size:   256 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | "
            f"number of skipped iterations:   0 | number of nan iterations:   0 |\n")


def write_log(path: Path, first: int, last: int) -> None:
    with path.open("a") as fh:
        for step in range(first, last + 1):
            fh.write(line(step))
            if step % 1000 == 0:
                fh.write(f" validation loss at iteration {step} | lm loss value: 2.6E+00 | lm loss PPL: 13.4 | \n")


def naive_rows(path: str) -> int:
    """The straightforward reader: the text whole, a dict a line, one frame of them."""
    import re

    import pandas as pd

    records = []
    for text in Path(path).read_text().splitlines():
        m = re.search(r"iteration\s+(\d+)/", text)
        if not m:
            continue
        record = {"step": int(m.group(1))}
        for field in text.split(" | ")[1:]:
            name, _, value = field.partition(":")
            try:
                record[name.strip()] = float(value.strip(" |"))
            except ValueError:
                pass
        records.append(record)
    frame = pd.DataFrame.from_records(records).set_index("step")
    return int(frame.notna().sum().sum())


def in_child(reader: tuple[str, str], path: Path) -> tuple[int, float, float]:
    """(rows, CPU s, peak MB above its imports) of one reader in a fresh process."""
    setup, call = reader
    out = subprocess.run([sys.executable, "-c", CHILD.format(setup=setup, reader=call), str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


def best(reader: tuple[str, str], path: Path) -> tuple[int, float, float]:
    runs = [in_child(reader, path) for _ in range(2)]
    return runs[0][0], min(r[1] for r in runs), min(r[2] for r in runs)


def follow_poll(path: Path, steps: int) -> tuple[float, float]:
    """CPU seconds of one poll after APPENDED iterations: read on (LineTail) vs read again whole."""
    from monitor.importers import get_format
    from monitor.importers.megatron_log import parse_megatron_log

    tail = get_format("megatron-log").tail(path)
    tail.read()
    write_log(path, steps + 1, steps + APPENDED)
    start = time.process_time()
    tail.read()
    on = time.process_time() - start
    start = time.process_time()
    parse_megatron_log(path)
    return on, time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    steps = QUICK_STEPS if args.quick else STEPS
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        write_log(path, 1, steps)
        size_mb = path.stat().st_size / 2**20
        ours_rows, ours_cpu, ours_mb = best(OURS, path)
        naive_rows_, naive_cpu, naive_mb = best(NAIVE, path)
        on, again = follow_poll(path, steps)
    rows = [{"reader": "ours (megatron_log)", "values": f"{ours_rows:,}", "CPU s": f"{ours_cpu:.1f}",
             "peak MB above imports": f"{ours_mb:.0f}"},
            {"reader": "text whole, a dict a line, one frame", "values": f"{naive_rows_:,}",
             "CPU s": f"{naive_cpu:.1f}", "peak MB above imports": f"{naive_mb:.0f}"}]
    body = (f"A log of {steps:,} iterations ({size_mb:.0f} MB), each reader in a process of its own, best of two:\n\n"
            + table(rows)
            + f"\n\nOurs: {ours_cpu / naive_cpu:.2f}x the CPU time and {ours_mb / naive_mb:.2f}x the peak memory of "
            f"the straightforward reader.\n\n`import --follow`, one poll after the job appended {APPENDED:,} "
            f"iterations: read on from the last whole line {on * 1000:.0f} ms of CPU, read again from the start "
            f"{again:.1f} s ({again / max(on, 1e-9):.0f}x).")
    record("line_logs", "Megatron-LM stdout log: parse and follow at a long run's length", body)


if __name__ == "__main__":
    main()
