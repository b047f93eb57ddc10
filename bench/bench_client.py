"""`Monitor.log` vs `wandb.log` in offline mode: cost per call to the training loop, 10 metrics.

Both get the same dict of 10 Python floats each step. wandb.log was measured at 250-370 us a call on
this kind of machine (2026-11, measured as below); the goal is Monitor.log >= 50x cheaper.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from bench.results import record, table
from monitor.client import Monitor, MonitorSettings

KEYS = [f"train/metric_{i}" for i in range(10)]


def per_call(log, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    payloads = [dict(zip(KEYS, rng.normal(size=len(KEYS)).tolist())) for _ in range(256)]
    times = np.empty(n)
    for step in range(n):
        metrics = payloads[step % 256]
        started = time.perf_counter_ns()
        log(step, metrics)
        times[step] = time.perf_counter_ns() - started
    return times / 1000.0  # microseconds


def bench_monitor(n: int, tmp: str) -> np.ndarray:
    mon = Monitor("bench", store=f"sqlite:///{tmp}/bench.db", settings=MonitorSettings(spool_dir=tmp))
    try:
        return per_call(mon.log, n)
    finally:
        mon.close()


def bench_wandb(n: int, tmp: str) -> np.ndarray:
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_ERROR_REPORTING="false",
                      WANDB_DIR=tmp)
    import wandb

    run = wandb.init(project="gapwatch-bench", dir=tmp, mode="offline")
    try:
        return per_call(lambda step, m: run.log(m, step=step), n)
    finally:
        run.finish()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_client")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n_ours, n_wandb = (20_000, 1_000) if args.quick else (100_000, 5_000)
    with tempfile.TemporaryDirectory() as tmp:
        ours = bench_monitor(n_ours, tmp)
        theirs = bench_wandb(n_wandb, tmp)
    rows = [
        {"logger": name, "calls": len(t), "mean us": f"{t.mean():.2f}", "p50 us": f"{np.percentile(t, 50):.2f}",
         "p99 us": f"{np.percentile(t, 99):.2f}"}
        for name, t in (("gapwatch Monitor.log", ours), ("wandb.log (offline)", theirs))
    ]
    record("client", "Client: cost of one log call with 10 metrics",
           table(rows) + f"\n\nMonitor.log is **{theirs.mean() / ours.mean():.0f}x** cheaper than wandb.log "
           f"on the mean (goal: >= 50x).")


if __name__ == "__main__":
    main()
