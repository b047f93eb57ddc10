"""A team's runs against one baseline: what the watch service holds and spends when several runs
share a long reference, next to the way it was (each run's watcher reading its own copy).

The reference is a synthetic 1,410,000-step run (bench_report.synthetic_run: 10 dense metrics a
step, held-out every 1,000 steps, three downstream tasks every 5,000) in a SQLite store; RUNS new
runs of 2,000 steps each name it as their reference. One watch service judges them all in one
pass, then once more after each run logged 10 more steps. Measured for both ways, one after the
other in one process: the memory Python's allocator traces as held by the service after the first
pass (tracemalloc, which counts NumPy's arrays too) and its peak during the pass, the wall time of
each pass (a second run of the scenario, untraced), and how often the reference was read from the
store. `python -m bench shared_reference [--quick]`.
"""

from __future__ import annotations

import argparse
import gc
import io
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from tqdm import tqdm

from bench.bench_report import synthetic_run
from bench.bench_watch import long_rows
from bench.results import record, table
from monitor.alerting.config import AlertingConfig
from monitor.store import open_store
from monitor.watch.config import WatchConfig
from monitor.watch.run_watcher import RunWatcher
from monitor.watch.service import TargetSpec, WatchService

RUNS = 8
RUN_STEPS = 2_000
NEW_STEPS = 10


class PrivateReferences(WatchService):
    """The watch service as it was: every run's watcher reads and holds its own copy of the reference."""

    def _watcher(self, target):
        if target not in self.watchers:
            self.watchers[target] = RunWatcher(self.store, target.run, target.reference, self.make_engine(),
                                               window_steps=self.config.catch_up_steps)
        return self.watchers[target]


def build(url: str, reference_steps: int) -> list[str]:
    ref = synthetic_run("baseline", reference_steps, seed=1)
    runs = [f"run{i}" for i in range(RUNS)]
    with open_store(url) as store:
        store.ensure_run("baseline", config=ref.info.config, tokens_per_step=ref.info.tokens_per_step)
        for lo in range(0, reference_steps, 100_000):
            store.write_metrics("baseline", long_rows(ref, lo, min(lo + 100_000, reference_steps)))
        for i, name in enumerate(runs):
            run = synthetic_run(name, RUN_STEPS + NEW_STEPS, seed=10 + i)
            store.ensure_run(name, config=run.info.config, tokens_per_step=run.info.tokens_per_step,
                             reference="baseline")
            store.write_metrics(name, long_rows(run, 0, RUN_STEPS))
    return runs


def measure(built: Path, tmp: Path, runs: list[str], service_class, traced: bool) -> dict:
    """Two passes of one service over every run (the second after NEW_STEPS more steps each), on a
    copy of the built store, so that every measure starts from the runs' first step."""
    new_rows = {name: long_rows(synthetic_run(name, RUN_STEPS + NEW_STEPS, seed=10 + i), RUN_STEPS,
                                RUN_STEPS + NEW_STEPS) for i, name in enumerate(runs)}
    copy = tmp / "measured.db"
    shutil.copyfile(built, copy)
    with open_store(f"sqlite:///{copy}") as store:
        reads = []
        load_run = store.load_run
        store.load_run = lambda name, *a, **k: reads.append(name) or load_run(name, *a, **k)
        config = WatchConfig(alerting=AlertingConfig(sinks=[]), catch_up_steps=100_000)
        gc.collect()
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        service = service_class(store, config, TargetSpec(runs=tuple(runs)), sinks={}, stream=io.StringIO())
        service.poll()
        first = time.perf_counter() - started
        held, peak = tracemalloc.get_traced_memory() if traced else (0, 0)
        for name, rows in new_rows.items():
            store.write_metrics(name, rows)
        started = time.perf_counter()
        service.poll()
        second = time.perf_counter() - started
        if traced:
            tracemalloc.stop()
    copy.unlink()
    return {"first_s": first, "second_s": second, "held_mb": held / 2**20, "peak_mb": peak / 2**20,
            "reads": reads.count("baseline")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shared_reference")
    parser.add_argument("--quick", action="store_true", help="a 100,000-step reference")
    args = parser.parse_args(argv)
    reference_steps = 100_000 if args.quick else 1_410_000
    tmp = Path(tempfile.mkdtemp(prefix="bench_shared_"))
    built = tmp / "team.db"
    runs = build(f"sqlite:///{built}", reference_steps)
    ways = (("each watcher its own copy (as it was)", PrivateReferences), ("shared (now)", WatchService))
    results = {}
    for name, cls in tqdm(ways, desc="ways", unit="way"):
        memory = measure(built, tmp, runs, cls, traced=True)
        timing = measure(built, tmp, runs, cls, traced=False)
        results[name] = {**memory, "first_s": timing["first_s"], "second_s": timing["second_s"]}
    rows = [{"reference": name, "read from the store": r["reads"],
             "memory held after the first pass (MB)": f"{r['held_mb']:.0f}",
             "peak during it (MB)": f"{r['peak_mb']:.0f}", "first pass (s)": f"{r['first_s']:.1f}",
             "next pass, 10 new steps a run (s)": f"{r['second_s']:.2f}"} for name, r in results.items()]
    old, new = results[ways[0][0]], results[ways[1][0]]
    body = (f"{table(rows)}\n\n{RUNS} runs of {RUN_STEPS:,} steps judged by one watch service against one "
            f"{reference_steps:,}-step reference (all 12 detectors, SQLite). Shared, the service holds "
            f"{old['held_mb'] / max(new['held_mb'], 1e-9):.1f}x less memory after the first pass and "
            f"spends {old['first_s'] / max(new['first_s'], 1e-9):.1f}x less time on it.")
    record("shared_reference", "Watch: runs sharing one long reference", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
