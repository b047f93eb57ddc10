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

# Which run each training phase trains (as app/demo.py names them), for the load it logged.
PHASE_RUNS = {"reference run": "reference", "candidate run": "double-sharding", "run killed": "resume-off-by-one",
              "clean rerun": "clean-rerun"}


def logged_load(store_url: str) -> dict[str, float]:
    """Mean sys/load_per_cpu each run logged while it trained (the load the phase ran under)."""
    from monitor.schema import SYS_LOAD_PER_CPU
    from monitor.store import open_store

    with open_store(store_url) as store:
        loads = {}
        for run in PHASE_RUNS.values():
            scalars = store.load_run(run).scalars
            if SYS_LOAD_PER_CPU in scalars.columns:
                loads[run] = float(scalars[SYS_LOAD_PER_CPU].mean())
        return loads


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
        loads = logged_load(demo.config.store_url)
    load_after = os.getloadavg()
    def load_of(title: str) -> str:
        run = next((r for prefix, r in PHASE_RUNS.items() if title.startswith(prefix)), None)
        return f"{loads[run]:.2f}" if run in loads else ""

    rows = [{"phase": title, "seconds": f"{seconds:.0f}", "share": f"{seconds / total:.0%}",
             "load per CPU while training (mean logged)": load_of(title)} for title, seconds in phases.items()]
    rows.append({"phase": "**whole demo**", "seconds": f"**{total:.0f}**", "share": "100%",
                 "load per CPU while training (mean logged)": ""})
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
