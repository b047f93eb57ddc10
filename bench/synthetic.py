"""The synthetic pre-training run the detector and incident benchmarks share: a loss curve handed in,
and the nine other dense metrics a trainer logs every step (grad norm, learning rate, tokens,
throughput, data-loader cursor) around it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from monitor.schema import (
    DATA_CURSOR,
    DATA_EPOCH,
    DATA_UNIQUE_FRACTION,
    OPTIM_LR,
    PERF_MFU,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    TRAIN_TOKENS,
    RunInfo,
)

BATCH, RECORDS, TOKENS = 512, 2_000_000_000, 512 * 4096
"""Sequences a step, records of the corpus, tokens a step: a 2M-token batch of 4,096-token
sequences, as OLMo 2 7B trains."""


def ar1(n: int, sigma: float, rho: float, seed: int) -> np.ndarray:
    """`n` steps of AR(1) noise with marginal standard deviation `sigma` and lag-1 correlation `rho`."""
    rng = np.random.default_rng(seed)
    return lfilter([1.0], [1.0, -rho], rng.normal(0, sigma * math.sqrt(1 - rho * rho), n))


def dense_metrics(steps: np.ndarray, loss: np.ndarray, seed: int, pause_every: int | None = None) -> pd.DataFrame:
    """The ten per-step metrics of a run whose train loss is `loss` at `steps` (1, 2, ...);
    `pause_every`: a step 30% slower that often (a checkpoint save)."""
    n = steps.size
    t = 0.5 * (1 + np.abs(ar1(n, 0.01, 0.0, seed + 1)))
    if pause_every:
        t[::pause_every] *= 1.3
    return pd.DataFrame({
        TRAIN_LOSS: loss,
        TRAIN_GRAD_NORM: 0.3 * np.exp(ar1(n, 0.1, 0.5, seed + 2)),
        OPTIM_LR: 3e-4 * np.minimum(steps / 2000, 1.0),
        TRAIN_TOKENS: steps * float(TOKENS),
        PERF_STEP_TIME_S: t,
        PERF_TOKENS_PER_S: TOKENS / t,
        PERF_MFU: 0.45 * 0.5 / t,
        DATA_CURSOR: steps * float(BATCH),
        DATA_EPOCH: steps * BATCH / RECORDS,
        DATA_UNIQUE_FRACTION: np.minimum(steps * BATCH / RECORDS, 1.0),
    }, index=steps)


def run_info(name: str) -> RunInfo:
    return RunInfo(name=name, tokens_per_step=float(TOKENS), global_batch_size=BATCH, records_per_epoch=RECORDS)
