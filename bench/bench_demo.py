"""`make demo`'s phases, timed: where the demo's minutes go, with the machine's load beside them.

The demo runs as `make demo` runs it (child `gapwatch` processes, the per-user eval-data cache),
without serving the dashboard. A shared machine's load changes every figure here, so the load
average is recorded when the demo starts and when it ends; the goal (about 5 minutes after the
first install) is for two quiet cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench.results import record, table


def main(argv: list[str] | None = None) -> None:
    from app.demo import Demo, DemoConfig

    parser = argparse.ArgumentParser(prog="bench_demo")
    parser.add_argument("--quick", action="store_true", help="the tiny preset instead of the demo's")
    args = parser.parse_args(argv)
    preset = "tiny" if args.quick else "demo"
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gapwatch-bench-demo-") as tmp:
        demo = Demo(DemoConfig(workdir=Path(tmp), config=preset, serve=False))
        started = time.monotonic()
        ok = demo.run()
        total = time.monotonic() - started
        phases = demo.timed()
    load_after = os.getloadavg()
    rows = [{"phase": title, "seconds": f"{seconds:.0f}", "share": f"{seconds / total:.0%}"}
            for title, seconds in phases.items()]
    rows.append({"phase": "**whole demo**", "seconds": f"**{total:.0f}**", "share": "100%"})
    downstream = (f"downstream evals every {demo.config.downstream_every} steps on "
                  f"{len(demo.config.downstream_tasks)} tasks x {demo.config.downstream_limit} documents"
                  if demo.eval_data else "no downstream evals (the eval data could not be fetched)")
    body = "\n".join([
        f"`gapwatch demo --no-serve` on the {preset} preset ({downstream}); every expectation held: "
        f"{'yes' if ok else 'NO'}.",
        "",
        table(rows),
        "",
        f"- Load average (1/5/15 min) at the start: {' / '.join(f'{x:.1f}' for x in load_before)}; "
        f"at the end: {' / '.join(f'{x:.1f}' for x in load_after)}; on {os.cpu_count()} cores.",
        "- The goal is about 5 minutes on two quiet cores after the first install; on a loaded "
        "machine the training phases stretch with the load (the trainer logs sys/load_per_cpu, "
        "and throughput findings cite it).",
    ])
    record("demo", "Demo: the phases of `make demo`", body)


if __name__ == "__main__":
    main()
