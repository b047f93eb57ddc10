"""`Monitor.log` on the training thread by kind of value, and its cost to a small torch model's step.

1. Cost of one call with 10 metrics, for each kind of value a trainer logs: Python floats, NumPy
   float32 scalars, NumPy 0-d arrays, CPU torch tensors, and (where a GPU is present) CUDA tensors,
   which start a copy into pinned memory behind an event instead of being read (goal: < 20 us).
   The kinds take turns in rounds, each into a run of its own, so they share the machine's load.
2. Step time of a small torch MLP (8 layers 256 wide, batch 32: forward, backward, AdamW) that
   computes 10 metric tensors a step, with and without logging them, in alternating pairs of steps
   (goal: <= 1% overhead), and the time spent inside `log()` itself.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from bench.results import record, table
from monitor.client import Monitor, MonitorSettings

KEYS = ["train/loss", "train/grad_norm"] + [f"train/layer_{i}_norm" for i in range(8)]


def payloads(kind: str, device: str | None) -> list[dict]:
    """256 dicts of 10 values of one kind (fresh objects each, as a trainer makes them)."""
    import torch

    rng = np.random.default_rng(0)
    out = []
    for _ in range(256):
        values = rng.normal(size=len(KEYS))
        if kind == "float":
            out.append(dict(zip(KEYS, values.tolist())))
        elif kind == "numpy float32":
            out.append({k: np.float32(v) for k, v in zip(KEYS, values)})
        elif kind == "numpy 0-d array":
            out.append({k: np.array(v) for k, v in zip(KEYS, values)})
        else:
            out.append({k: torch.tensor(v, dtype=torch.float32, device=device) for k, v in zip(KEYS, values)})
    return out


def call_costs(kinds: dict[str, str | None], calls: int, rounds: int, tmp: str) -> dict[str, np.ndarray]:
    """Per-call microseconds; each round gives every kind a fresh Monitor of its own (one writer
    thread at a time), in turn, so the kinds meet the same machine load."""
    data = {kind: payloads(kind, device) for kind, device in kinds.items()}
    times: dict[str, list] = {kind: [] for kind in kinds}
    for round_ in range(rounds):
        for i, kind in enumerate(kinds):
            chunk = np.empty(calls)
            with Monitor(f"bench-{i}", store=f"sqlite:///{tmp}/calls-{i}.db",
                         settings=MonitorSettings(spool_dir=tmp)) as mon:
                for n in range(calls):
                    metrics = data[kind][n % 256]
                    started = time.perf_counter_ns()
                    mon.log(round_ * calls + n, metrics)
                    chunk[n] = time.perf_counter_ns() - started
            times[kind].append(chunk / 1000.0)
    return {kind: np.concatenate(t) for kind, t in times.items()}


def step_times(device: str, pairs: int, tmp: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seconds of steps without and with logging, taken in alternating pairs (which of the two
    comes first alternates too), and the seconds spent inside `log()` of each logging step."""
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 256) for _ in range(8)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.GELU())]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 256, device=device)
    y = torch.randn(32, 256, device=device)

    def train_step() -> dict:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        metrics = {"train/loss": loss, "train/grad_norm": grad_norm}
        metrics.update({f"train/layer_{i}_norm": layer.weight.detach().norm() for i, layer in enumerate(layers)})
        return metrics

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    mon = Monitor("bench-steps", store=f"sqlite:///{tmp}/steps.db", settings=MonitorSettings(spool_dir=tmp))
    off, on, in_log = [], [], []
    step = 0
    try:
        for _ in range(5):  # warm up both paths
            mon.log(step, train_step())
            step += 1
        for pair in range(pairs):
            for logging in ((False, True) if pair % 2 else (True, False)):
                sync()
                started = time.perf_counter()
                metrics = train_step()
                if logging:
                    called = time.perf_counter()
                    mon.log(step, metrics)
                    in_log.append(time.perf_counter() - called)
                sync()
                (on if logging else off).append(time.perf_counter() - started)
                step += 1
    finally:
        mon.close()
    return np.array(off), np.array(on), np.array(in_log)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_log_values")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    args = parser.parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    kinds: dict[str, str | None] = {"float": None, "numpy float32": None, "numpy 0-d array": None,
                                    "torch CPU tensor": "cpu"}
    if device == "cuda":
        kinds["torch CUDA tensor"] = "cuda"
    calls, rounds, pairs = (2_000, 3, 200) if args.quick else (10_000, 5, 1_000)
    # One intra-op thread: on a shared 2-core machine torch's two threads wait on each other and
    # a step's time varies tenfold, which would hide a 1% difference.
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        costs = call_costs(kinds, calls, rounds, tmp)
        off, on, in_log = step_times(device, pairs, tmp)
    rows = [{"values (10 a call)": kind, "calls": len(t), "mean us": f"{t.mean():.2f}",
             "p50 us": f"{np.percentile(t, 50):.2f}", "p99 us": f"{np.percentile(t, 99):.2f}"}
            for kind, t in costs.items()]
    overhead = np.median(on) / np.median(off) - 1
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU only (no GPU on this machine)"
    body = (table(rows)
            + f"\n\nDevice: {where}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end. "
              f"Step time of an 8-layer 256-wide MLP (batch 32, AdamW, one torch thread, 10 metric tensors a "
              f"step), {pairs} pairs of steps without and with logging the 10 tensors, alternating: median "
              f"{np.median(off) * 1e3:.3f} ms without, {np.median(on) * 1e3:.3f} ms with: **{overhead * 100:+.2f}%** "
              f"(goal: <= 1%); the steps without logging alone spread {np.percentile(off, 90) / np.percentile(off, 10) - 1:.0%} "
              f"(p90/p10). Inside `log()` on the training thread: median {np.median(in_log) * 1e6:.1f} us, "
              f"**{np.median(in_log) / np.median(on) * 100:.3f}%** of a step.")
    record(f"log_values_{device}", f"Client: Monitor.log by kind of value, and step overhead ({device})", body)


if __name__ == "__main__":
    main()
