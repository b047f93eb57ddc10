"""The watch service's cost as a run grows: CPU per poll and saved state size at 10k, 100k and 1.41M
steps, next to a whole-run `detect` of the same pair.

Each size is a synthetic pair (bench_report.synthetic_run: 10 dense metrics a step, held-out every
1,000 steps, three downstream tasks every 5,000) in a SQLite store. The watch service's run watcher
catches up on the run (all detectors), then judges 10 new steps five times: the median CPU time of
those polls and the size of the JSON state it saves are the measure. Both should stay flat with the
run's length (goal: each within 2x of the 10k figure), since the detectors keep only the windows
they need; `detect` reads and judges the whole run and grows with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from bench.bench_report import synthetic_run
from bench.results import record, table
from monitor.judging.judge import detect_stored
from monitor.judging.engine import DetectionEngine
from monitor.store import open_store
from monitor.watch.run_watcher import RunWatcher

POLLS = 5
NEW_STEPS = 10


def long_rows(data, lo: int, hi: int) -> pd.DataFrame:
    part = data.scalars.loc[lo + 1:hi]
    long = part.reset_index().melt(id_vars="step", var_name="key", value_name="value")
    return long[long["value"].notna()]


def measure(steps: int, tmp: Path) -> dict:
    run = synthetic_run("run", steps + POLLS * NEW_STEPS, seed=2, shift=-0.05)
    ref = synthetic_run("ref", steps + POLLS * NEW_STEPS, seed=1)
    url = f"sqlite:///{tmp / f'watch_{steps}.db'}"
    with open_store(url) as store:
        store.ensure_run("ref", config=ref.info.config, tokens_per_step=ref.info.tokens_per_step)
        store.ensure_run("run", config=run.info.config, tokens_per_step=run.info.tokens_per_step, reference="ref")
        for lo in range(0, steps + POLLS * NEW_STEPS, 100_000):
            store.write_metrics("ref", long_rows(ref, lo, min(lo + 100_000, steps + POLLS * NEW_STEPS)))
        for lo in range(0, steps, 100_000):
            store.write_metrics("run", long_rows(run, lo, min(lo + 100_000, steps)))
        watcher = RunWatcher(store, "run", "ref", DetectionEngine())
        started = time.monotonic()
        while True:
            result = watcher.poll()
            if result is None or not result.more:
                break
        catch_up = time.monotonic() - started
        polls = []
        last = steps
        for _ in range(POLLS):
            store.write_metrics("run", long_rows(run, last, last + NEW_STEPS))
            last += NEW_STEPS
            t = time.process_time()
            watcher.poll()
            polls.append(time.process_time() - t)
        state = len(json.dumps(watcher.state()[1]))
        t = time.perf_counter()
        detect_stored(store, "run", write=False)
        detect_s = time.perf_counter() - t
    return {"steps": steps, "catch_up_s": catch_up, "poll_ms": 1000 * statistics.median(polls),
            "state_kb": state / 1024, "detect_s": detect_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench watch")
    parser.add_argument("--quick", action="store_true", help="10k, 30k and 100k steps")
    args = parser.parse_args(argv)
    sizes = (10_000, 30_000, 100_000) if args.quick else (10_000, 100_000, 1_410_000)
    tmp = Path(tempfile.mkdtemp(prefix="bench_watch_"))
    results = [measure(n, tmp) for n in tqdm(sizes, desc="run sizes", unit="run")]
    base = results[0]
    rows = [{"steps": f"{r['steps']:,}", "watch poll, 10 new steps (CPU ms)": f"{r['poll_ms']:.0f}",
             "vs 10k": f"{r['poll_ms'] / base['poll_ms']:.2f}x", "watch state (KB)": f"{r['state_kb']:.0f}",
             "vs 10k ": f"{r['state_kb'] / base['state_kb']:.2f}x", "catch-up from step 0 (s)": f"{r['catch_up_s']:.0f}",
             "whole-run detect (s)": f"{r['detect_s']:.1f}"} for r in results]
    flat = all(r["poll_ms"] <= 2 * base["poll_ms"] and r["state_kb"] <= 2 * base["state_kb"] for r in results)
    body = (f"{table(rows)}\n\nAll 12 detectors against the reference, SQLite store. Goal: poll cost and state "
            f"size within 2x of the 10k figure at every size: {'met' if flat else 'NOT met'}. The whole-run "
            "detect (load both runs, align, judge) grows with the run, as it must.")
    record("watch", "Watch: poll cost and state size as the run grows", body)
    return 0
