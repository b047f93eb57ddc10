"""The watch service's cost as a run grows and as it widens: CPU per poll and saved state size at
10k, 100k and 1.41M steps, and at the width of a real run, next to a whole-run `detect` of the same
pair.

Each size is a synthetic pair (bench_report.synthetic_run: 10 dense metrics a step, held-out every
1,000 steps, three downstream tasks every 5,000) in a SQLite store; the wide rows add 100 more
series logged every step to the run (per-layer gradient norms, as a real run logs them). The watch
service's run watcher catches up on the run (all detectors), then judges 10 new steps five times:
the median CPU time of those polls and the size of the JSON state it saves are the measure. Both
should stay flat with the run's length (goal: each within 2x of the 10k figure of the same width),
since the detectors keep only the windows they need; `detect` reads and judges the whole run and
grows with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
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
# Series logged every step beside synthetic_run's ten, in the wide rows.
WIDE_EXTRA = 100


def long_rows(data, lo: int, hi: int) -> pd.DataFrame:
    part = data.scalars.loc[lo + 1:hi]
    long = part.reset_index().melt(id_vars="step", var_name="key", value_name="value")
    return long[long["value"].notna()]


def widened(run, extra: int):
    """The run with `extra` per-layer gradient norms logged every step."""
    rng = np.random.default_rng(3)
    norms = pd.DataFrame(np.exp(rng.normal(0.0, 0.1, (len(run.scalars), extra))), index=run.scalars.index,
                         columns=[f"train/grad_norm/layer_{i:03d}" for i in range(extra)])
    run.scalars = pd.concat([run.scalars, norms], axis=1)
    return run


def measure(steps: int, extra: int, tmp: Path) -> dict:
    run = widened(synthetic_run("run", steps + POLLS * NEW_STEPS, seed=2, shift=-0.05), extra)
    ref = synthetic_run("ref", steps + POLLS * NEW_STEPS, seed=1)
    url = f"sqlite:///{tmp / f'watch_{steps}_{extra}.db'}"
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
    return {"steps": steps, "width": len(run.scalars.columns), "extra": extra, "catch_up_s": catch_up,
            "poll_ms": 1000 * statistics.median(polls),
            "state_kb": state / 1024, "detect_s": detect_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench watch")
    parser.add_argument("--quick", action="store_true", help="10k, 30k and 100k steps")
    args = parser.parse_args(argv)
    sizes = (10_000, 30_000, 100_000) if args.quick else (10_000, 100_000, 1_410_000)
    # The wide run at the lengths a wide store holds in minutes here (100 more series a step).
    cases = [(n, 0) for n in sizes] + [(n, WIDE_EXTRA) for n in sizes[:2]]
    tmp = Path(tempfile.mkdtemp(prefix="bench_watch_"))
    results = [measure(n, extra, tmp) for n, extra in tqdm(cases, desc="runs", unit="run")]
    base = {r["extra"]: r for r in results if r["steps"] == sizes[0]}
    rows = [{"steps": f"{r['steps']:,}", "series in the run": r["width"],
             "watch poll, 10 new steps (CPU ms)": f"{r['poll_ms']:.0f}",
             "vs 10k": f"{r['poll_ms'] / base[r['extra']]['poll_ms']:.2f}x", "watch state (KB)": f"{r['state_kb']:.0f}",
             "vs 10k ": f"{r['state_kb'] / base[r['extra']]['state_kb']:.2f}x",
             "catch-up from step 0 (s)": f"{r['catch_up_s']:.0f}",
             "whole-run detect (s)": f"{r['detect_s']:.1f}"} for r in results]
    flat = all(r["poll_ms"] <= 2 * base[r["extra"]]["poll_ms"] and r["state_kb"] <= 2 * base[r["extra"]]["state_kb"]
               for r in results)
    narrow, wide = base[0], base[WIDE_EXTRA]
    body = (f"{table(rows)}\n\nAll 12 detectors against the reference, SQLite store. Goal: poll cost and state "
            f"size within 2x of the 10k figure of the same width at every size: {'met' if flat else 'NOT met'}. "
            f"At {wide['width']} series a poll costs {wide['poll_ms'] / narrow['poll_ms']:.1f}x the "
            f"{narrow['width']}-series poll at 10k steps, and the state {wide['state_kb'] / narrow['state_kb']:.1f}x. "
            "The whole-run detect (load both runs, align, judge) grows with the run, as it must.")
    record("watch", "Watch: poll cost and state size as the run grows", body)
    return 0
