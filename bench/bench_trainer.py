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
    steps, rounds = (30, 1) if args.quick else (60, 2)
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
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for round_no in range(1, rounds + 1):
            for variant in VARIANTS:
                started = time.monotonic()
                result = run_variant(variant, config, tmp, round_no)
                times[variant] += result.step_times
                print(f"round {round_no} {variant}: {config.tokens_per_step / statistics.median(result.step_times):,.0f} "
                      f"tokens/s (median step), {time.monotonic() - started:.0f} s", flush=True)
        peak = flops.measure_cpu_peak()

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
            "MFU": f"{per_token * tps / peak:.1%}",
        })
    on = config.tokens_per_step / statistics.median(times["on"])
    overhead = 1 - on / off
    body = "\n".join([
        f"Demo config ({config.model.param_count():,} parameters, {config.tokens_per_step:,} tokens a step, "
        f"{config.data.data_hosts} data hosts), {rounds} round(s) of {steps} steps per variant, interleaved; "
        f"steady steps only (not compiling, not after periodic work); medians.",
        "",
        table(rows),
        "",
        f"- Monitoring overhead (on vs off): **{100 * overhead:+.2f}%** of tokens/s; goal <= "
        f"{100 * OVERHEAD_GOAL:.0f}%: {'met' if overhead <= OVERHEAD_GOAL else 'not met'}. Differences "
        "smaller than the round-to-round spread are noise on this shared machine.",
        f"- This CPU's float32 matmul peak through XLA, measured beside the runs: "
        f"{peak / 1e9:.1f} GFLOP/s; model FLOPs per token {per_token / 1e6:.2f} M "
        "(6N + causal/sliding attention, trainer/flops.py).",
        f"- Load average when it started: {load_before:.1f} on {os.cpu_count()} cores.",
    ])
    record("trainer", "Trainer: throughput with and without monitoring, MFU on this CPU", body)


if __name__ == "__main__":
    main()
