"""Runs for the incident benchmark and tests: one run and its reference of one recipe, with one
fault that persists (memorization, a worse run) or passes (a burst of loss spikes), shaped like a
pre-training run: ten dense metrics every step, held-out loss every 1,000 steps and 20 downstream
tasks with their standard errors every 1,000 steps.

The loss follows a power law with AR(1) noise; the two runs differ by their noise (seed) and by a
persistent offset of 0.2% of the loss, the between-run spread of the 13 repeats (noise.py)."""

from __future__ import annotations


import numpy as np
import pandas as pd

from bench.synthetic import ar1, dense_metrics, run_info
from monitor.detectors import make_run
from monitor.schema import (
    RunData,
    downstream_key,
    heldout_key,
)

EVAL_EVERY = 1_000
TASKS = tuple(f"task{i:02d}" for i in range(20))
TASK_N = 2_000
FAULT_FROM = 0.64
"""Share of the run after which a persistent fault is in force (to the end of the run)."""
ONSET_SHARE = 0.01
"""A persistent fault sets in over 1% of the run (a loader bug takes effect as its epoch turns)."""
BURST_STEPS = 200


def _onset(steps: np.ndarray, n: int) -> np.ndarray:
    """0 before FAULT_FROM of the run, then up to 1 over the next ONSET_SHARE of it, then 1."""
    return np.clip((steps - n * FAULT_FROM) / (n * ONSET_SHARE), 0.0, 1.0)


def story_run(name: str, n: int, seed: int, train_gap: float = 0.0, heldout_gap: float = 0.0,
              burst_at: int | None = None, offset: float = 0.0) -> RunData:
    """A run of `n` steps. From FAULT_FROM of the run on, train loss moves by `train_gap` nats and
    held-out loss by `heldout_gap`; `burst_at` puts a BURST_STEPS-long burst of loss spikes there."""
    steps = np.arange(1, n + 1)
    curve = 2.2 + 9.0 * (steps + 50.0) ** -0.3
    fault = _onset(steps, n)
    loss = curve * (1 + offset) + ar1(n, 0.03, 0.3, seed) + train_gap * fault
    if burst_at is not None:
        burst = steps[(steps >= burst_at) & (steps < burst_at + BURST_STEPS)]
        loss[burst[::10] - 1] += 1.5
    frame = dense_metrics(steps, loss, seed)
    ck = steps[steps % EVAL_EVERY == 0]
    ck_fault = _onset(ck, n)
    evals = {heldout_key("c4", "loss"): 2.25 + 9.0 * (ck + 50.0) ** -0.3 * (1 + offset)
             + ar1(ck.size, 0.003, 0, seed + 3) + heldout_gap * ck_fault,
             heldout_key("c4", "stderr"): np.full(ck.size, 0.003)}
    rng = np.random.default_rng(seed + 4)
    for i, task in enumerate(TASKS):
        p = np.clip(0.3 + 0.02 * i + 0.2 * (1 - np.exp(-ck / (n / 3))), 0.05, 0.95)
        acc = rng.binomial(TASK_N, p) / TASK_N
        evals[downstream_key(task, "acc")] = acc
        evals[downstream_key(task, "acc", "stderr")] = np.sqrt(acc * (1 - acc) / TASK_N)
    frame = frame.join(pd.DataFrame(evals, index=ck), how="outer")
    frame.index.name = "step"
    return make_run(run_info(name), frame)


def reference(n: int) -> RunData:
    return story_run("reference", n, seed=1)


def memorizing(n: int, gap: float = 0.05) -> RunData:
    """Train loss `gap` below the reference from FAULT_FROM on, held-out and downstream tied."""
    return story_run("memorizing", n, seed=2, train_gap=-gap, offset=0.002)


def worse(n: int, gap: float = 0.1) -> RunData:
    """Train and held-out loss both `gap` above the reference from FAULT_FROM on."""
    return story_run("worse", n, seed=2, train_gap=gap, heldout_gap=gap, offset=0.002)


def clean(n: int) -> RunData:
    """Another seed of the reference's recipe."""
    return story_run("clean", n, seed=2, offset=0.002)


def spike_burst(n: int) -> RunData:
    """A clean run with a burst of loss spikes at 40% of the run, then clean to the end."""
    return story_run("spike-burst", n, seed=2, burst_at=int(n * 0.4), offset=0.002)
