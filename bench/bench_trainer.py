"""The trainer's throughput with monitoring off, on, and on with W&B as well; MFU on this CPU.

All variants train the demo config in this one process, interleaved round by round (off, on,
on+W&B, off, ...) so that drifts in the shared machine's load hit them alike, and share one compiled
train step. "Off" still computes every metric on the device (that is the trainer's own work); it
only replaces the logging client by `NullMonitor`. The goal: monitoring costs <= 1% of tokens/s.

MFU: model FLOPs per token (trainer/flops.py) x measured tokens/s / this CPU's float32 matmul peak
through XLA, measured here, beside the run (not the cached number).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.results import record, table

VARIANTS = ("off", "on", "on + W&B offline")
OVERHEAD_GOAL = 0.01  # issue 3: monitoring may cost at most 1% of throughput


class LogTimer:
    """Time spent inside `Sinks.log` on the training thread: the part of monitoring the loop waits for."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def install(self) -> None:
        from trainer.sinks import Sinks

        original = Sinks.log
        timer = self

        def timed(sinks, step, metrics):
            started = time.perf_counter()
            original(sinks, step, metrics)
            timer.seconds.append(time.perf_counter() - started)

        Sinks.log = timed


def writer_cpu_per_step(tmp: Path, n: int) -> float:
    """CPU seconds the store client spends per logged step off the training thread: fetching 13
    device scalars (the trainer's per-step metrics) and writing them to SQLite, measured as
    process CPU time while it logs and flushes n steps."""
    import jax.numpy as jnp

    from monitor.client import Monitor

    values = [jnp.float32(i) * 1.5 for i in range(13)]  # device arrays, as the step returns them
    keys = [f"train/metric_{i}" for i in range(13)]
    mon = Monitor("bench-writer", store=f"sqlite:///{tmp / 'writer.db'}")
    try:
        started = time.process_time()
        for step in range(1, n + 1):
            mon.log(step, dict(zip(keys, values)))
        mon.flush(timeout=300)
        return (time.process_time() - started) / n
    finally:
        mon.close()


def run_variant(variant: str, config, tmp: Path, round_no: int):
    from trainer.loop import RunOptions, train

    name = f"bench-{variant.split()[0]}-{'wandb' if 'W&B' in variant else 'plain'}-{round_no}"
    options = RunOptions(run=name, store=f"sqlite:///{tmp / 'bench.db'}", run_dir=tmp / name,
                         monitor=variant != "off", wandb="offline" if "W&B" in variant else None,
                         console_every=0)
    return train(config, options)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_trainer")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    steps, rounds = (30, 1) if args.quick else (40, 3)
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")

    from trainer import flops
    from trainer.config import PRESETS

    base = PRESETS["demo"]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # Held-out evals and checkpoints are periodic work, not the per-step cost being measured.
        config = base.replace(steps=steps, checkpoint_every=10 * steps, gc_every=0, preflight=False,
                              evals=dataclasses.replace(base.evals, heldout_every=0),
                              peak_flops=1.0)  # MFU is computed below against a fresh measurement
        # One unmeasured run first: it builds the corpus cache and compiles; the first process-level
        # run is also slower for reasons outside the trainer (cold file and CPU caches).
        run_variant("off", config, tmp, 0)
        timer = LogTimer()
        timer.install()
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        per_round: dict[str, list[float]] = {v: [] for v in VARIANTS}
        log_times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for round_no in range(1, rounds + 1):
            for variant in VARIANTS:
                started = time.monotonic()
                calls_before = len(timer.seconds)
                result = run_variant(variant, config, tmp, round_no)
                log_times[variant] += timer.seconds[calls_before:]
                times[variant] += result.step_times
                per_round[variant].append(config.tokens_per_step / statistics.median(result.step_times))
                print(f"round {round_no} {variant}: {per_round[variant][-1]:,.0f} tokens/s (median step), "
                      f"{time.monotonic() - started:.0f} s", flush=True)
        peak = flops.measure_cpu_peak()
        writer_cpu = writer_cpu_per_step(tmp, 2_000 if args.quick else 10_000)

    per_token = flops.flops_per_token(config.model, config.model.max_seq_len)
    off = config.tokens_per_step / statistics.median(times["off"])
    rows = []
    for variant in VARIANTS:
        tps = config.tokens_per_step / statistics.median(times[variant])
        rows.append({
            "monitoring": variant,
            "steps measured": len(times[variant]),
            "median step ms": f"{1000 * statistics.median(times[variant]):.1f}",
            "tokens/s": f"{tps:,.0f}",
            "vs off": f"{100 * (tps / off - 1):+.2f}%",
            "per round tokens/s": " / ".join(f"{x:,.0f}" for x in per_round[variant]),
            "log call µs (median)": f"{1e6 * statistics.median(log_times[variant]):.1f}",
            "MFU": f"{per_token * tps / peak:.1%}",
        })
    # Rounds drift with the machine's load; a variant is compared with "off" of its own round.
    paired = [1 - on / off_r for on, off_r in zip(per_round["on"], per_round["off"])]
    overhead = statistics.median(paired)
    spread = max(max(r) / min(r) - 1 for r in per_round.values())
    loop_share = statistics.median(log_times["on"]) / statistics.median(times["on"])
    body = "\n".join([
        f"Demo config ({config.model.param_count():,} parameters, {config.tokens_per_step:,} tokens a step, "
        f"{config.data.data_hosts} data hosts), {rounds} round(s) of {steps} steps per variant, interleaved; "
        f"steady steps only (not compiling, not after periodic work); medians.",
        "",
        table(rows),
        "",
        f"- Monitoring overhead, on vs off of the same round (median over rounds): "
        f"**{100 * overhead:+.2f}%** of tokens/s; goal <= {100 * OVERHEAD_GOAL:.0f}%. The same variant "
        f"varied by up to {100 * spread:.1f}% from round to round on this shared machine, so whole-run "
        "throughput cannot resolve 1% here; the direct measure below can.",
        f"- What the training thread spends in the logging call (`Sinks.log`: the store client's "
        f"queue append, plus the W&B fetcher's): {1e6 * statistics.median(log_times['on']):.1f} µs a step, "
        f"**{100 * loop_share:.4f}%** of a {1000 * statistics.median(times['on']):.0f} ms step "
        f"({'meets' if loop_share <= OVERHEAD_GOAL else 'misses'} the 1% goal); the values are fetched "
        "and written on the client's own threads.",
        f"- Those threads' work, measured apart (13 device scalars fetched and written to SQLite per "
        f"step): {1e6 * writer_cpu:.0f} CPU µs a step, **{100 * writer_cpu / statistics.median(times['on']):.3f}%** "
        "of one step's wall time on one core.",
        f"- This CPU's float32 matmul peak through XLA, measured beside the runs: "
        f"{peak / 1e9:.1f} GFLOP/s; model FLOPs per token {per_token / 1e6:.2f} M "
        "(6N + causal/sliding attention, trainer/flops.py).",
        f"- Load average when it started: {load_before:.1f} on {os.cpu_count()} cores.",
    ])
    record("trainer", "Trainer: throughput with and without monitoring, MFU on this CPU", body)


if __name__ == "__main__":
    main()
