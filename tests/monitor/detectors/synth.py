"""Synthetic runs shaped like real ones, for fire/silent detector tests.

The train loss is a power law with AR(1) noise; two runs "fed the same data order" share most of
their noise (as the 13 modded-nanogpt repeats do), runs with another seed keep their own.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from monitor.detectors import make_run
from monitor.schema import (
    DATA_CURSOR,
    DATA_EPOCH,
    DATA_EXPECTED_UNIQUE_FRACTION,
    DATA_SEEN_2PLUS_FRACTION,
    DATA_SEEN_ONCE_FRACTION,
    DATA_UNIQUE_FRACTION,
    PERF_MFU,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    RunData,
    RunInfo,
    downstream_key,
    heldout_key,
)


def ar1(n: int, sigma: float, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1) noise with standard deviation sigma and lag-1 correlation rho."""
    e = rng.normal(0.0, sigma * np.sqrt(1 - rho ** 2), n)
    first = rng.normal(0.0, sigma)
    out, _ = lfilter([1.0], [1.0, -rho], e, zi=[rho * first])
    return out


def loss_curve(steps: np.ndarray, floor: float = 2.8, scale: float = 8.0, alpha: float = 0.35) -> np.ndarray:
    return floor + scale * (steps + 10.0) ** (-alpha)


def train_loss(steps: np.ndarray, seed: int, shared_seed: int | None = 0, sigma: float = 0.04,
               own_share: float = 0.15) -> np.ndarray:
    """Loss curve + noise; `shared_seed` fixes the data-order part that two runs can share."""
    n = steps.size
    own = ar1(n, sigma * own_share, 0.3, np.random.default_rng(seed))
    shared = ar1(n, sigma, 0.3, np.random.default_rng(10_000 + (shared_seed if shared_seed is not None else seed)))
    return loss_curve(steps) + shared + own


def heldout(steps: np.ndarray, every: int, seed: int, offset: float = 0.0, stderr: float | None = 0.004,
            name: str = "c4") -> pd.DataFrame:
    """A held-out loss (and its standard error) at every `every` steps."""
    rng = np.random.default_rng(50_000 + seed)
    ck = steps[(steps % every == 0) & (steps > 0)]
    frame = pd.DataFrame({heldout_key(name, "loss"): loss_curve(ck) + 0.03 + offset
                          + rng.normal(0, stderr or 0.003, ck.size)}, index=ck)
    if stderr is not None:
        frame[heldout_key(name, "stderr")] = stderr
    return frame


def downstream(steps: np.ndarray, every: int, seed: int, tasks=("hellaswag", "arc_easy", "piqa", "boolq"),
               delta: float = 0.0, n: int = 2000) -> pd.DataFrame:
    """Accuracies that grow with training, with binomial noise of n items, and their /n."""
    rng = np.random.default_rng(70_000 + seed)
    ck = steps[(steps % every == 0) & (steps > 0)]
    cols = {}
    for i, task in enumerate(tasks):
        p = np.clip(0.3 + 0.05 * i + 0.25 * (1 - np.exp(-ck / 3000.0)) + delta, 0.01, 0.99)
        cols[downstream_key(task, "acc")] = rng.binomial(n, p) / n
        cols[downstream_key(task, "acc", "n")] = np.full(ck.size, float(n))
    return pd.DataFrame(cols, index=ck)


def run(name: str, scalars: pd.DataFrame, **info) -> RunData:
    return make_run(RunInfo(name=name, **info), scalars)


def pair(n_steps: int = 6000, offset_from: int | None = None, offset: float = 0.0, same_order: bool = True,
         held_offset: float = 0.0, eval_every: int = 500, seeds=(1, 2)) -> tuple[RunData, RunData]:
    """A run and its reference; from `offset_from` on the run's train loss moves by `offset` and
    its held-out loss by `held_offset`."""
    steps = np.arange(1, n_steps + 1)
    ref_loss = train_loss(steps, seeds[1], shared_seed=0)
    run_loss = train_loss(steps, seeds[0], shared_seed=0 if same_order else 99)
    held_shift = np.zeros(steps.size)
    if offset_from is not None:
        ramp = np.clip((steps - offset_from) / 500.0, 0, 1)
        run_loss = run_loss + offset * ramp
        held_shift = held_offset * ramp
    ref = pd.DataFrame({TRAIN_LOSS: ref_loss}, index=steps).join(heldout(steps, eval_every, seeds[1]), how="outer")
    r_held = heldout(steps, eval_every, seeds[0])
    r_held.iloc[:, 0] += held_shift[np.searchsorted(steps, r_held.index)]
    ours = pd.DataFrame({TRAIN_LOSS: run_loss}, index=steps).join(r_held, how="outer")
    return run("run", ours), run("reference", ref)


def grad_norm(steps: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(30_000 + seed)
    return 0.3 * np.exp(ar1(steps.size, 0.08, 0.5, rng)) + 0.2 * np.exp(-steps / 300.0)


def data_metrics(steps: np.ndarray, batch: int, epoch_records: int, shards: int = 1, offset: int = 0,
                 integer_epoch: bool = False) -> pd.DataFrame:
    """What our trainer's data loader logs after step s (steps count from 1): cursor s * batch,
    epoch = cursor / records per epoch, coverage shares. With shards > 1 the cursor advances
    `shards` global batches per step and coverage follows sampling with replacement (the
    double-sharding bug)."""
    consumed = (steps + offset) * batch
    cursor = consumed * shards
    x = consumed / epoch_records
    if shards == 1:
        unique = np.minimum(x, 1.0)
        once = np.where(x <= 1, x, np.clip(2 - x, 0, 1))
        twice = np.where(x <= 1, 0.0, np.clip(x - 1, 0, 1))
    else:
        unique = 1 - np.exp(-x)
        once = x * np.exp(-x)
        twice = unique - once
    epoch = cursor / epoch_records
    if integer_epoch:
        epoch = np.floor(epoch)
    return pd.DataFrame({DATA_CURSOR: cursor.astype(float), DATA_EPOCH: epoch, DATA_UNIQUE_FRACTION: unique,
                         DATA_SEEN_ONCE_FRACTION: once, DATA_SEEN_2PLUS_FRACTION: twice,
                         DATA_EXPECTED_UNIQUE_FRACTION: np.minimum(x, 1.0)}, index=steps)


def perf(steps: np.ndarray, seed: int, step_time: float = 0.5, jitter: float = 0.01) -> pd.DataFrame:
    rng = np.random.default_rng(90_000 + seed)
    t = step_time * (1 + rng.normal(0, jitter, steps.size))
    tokens = 65536 / t
    return pd.DataFrame({PERF_STEP_TIME_S: t, PERF_TOKENS_PER_S: tokens, PERF_MFU: 0.4 * step_time / t},
                        index=steps)


def full_run(name: str = "run", n_steps: int = 3000, seed: int = 1) -> RunData:
    """A clean run logging every kind of metric the detectors read."""
    steps = np.arange(1, n_steps + 1)
    frame = pd.DataFrame({TRAIN_LOSS: train_loss(steps, seed), TRAIN_GRAD_NORM: grad_norm(steps, seed)}, index=steps)
    frame = frame.join(perf(steps, seed)).join(data_metrics(steps, 32, 10_000_000))
    frame = frame.join(heldout(steps, 250, seed), how="outer").join(downstream(steps, 500, seed), how="outer")
    return run(name, frame, global_batch_size=32, records_per_epoch=10_000_000)
