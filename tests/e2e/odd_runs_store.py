"""A store of runs whose data the dashboard must survive, for its unit and browser tests.

- `packed`: a token count that grows, but not linearly (packed batches, HF
  `num_input_tokens_seen`), and no tokens_per_step: the runs overview once panicked reading it.
- `stuck`: a token count that never grows, a grad norm logged only as NaN, a held-out set
  evaluated once and a downstream task with one point; its reference is `packed`, and the two
  runs' token counts cannot be put on one axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.schema import (
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    TRAIN_TOKENS,
    downstream_key,
    heldout_key,
)
from monitor.store import open_store

PACKED, STUCK = "packed", "stuck"
TASKS = ("arc_easy", "hellaswag", "piqa")


@dataclass
class OddRuns:
    packed: str
    stuck: str
    steps: int


def build_odd_runs(url: str, steps: int = 3000, seed: int = 0) -> OddRuns:
    rng = np.random.default_rng(seed)
    s = np.arange(steps)
    loss = 2.6 + 8.5 * (s + 40.0) ** -0.35 + rng.normal(0, 0.01, steps)
    evals = np.arange(250, steps, 250)
    with open_store(url) as store:
        store.ensure_run(PACKED, project="odd")
        store.ensure_run(STUCK, project="odd", reference=PACKED)
        packed = {TRAIN_LOSS: loss, TRAIN_GRAD_NORM: 0.3 + np.abs(rng.normal(0, 0.03, steps)),
                  TRAIN_TOKENS: np.cumsum(rng.integers(3000, 4097, steps)).astype(float)}
        stuck = {TRAIN_LOSS: loss + 0.01, TRAIN_GRAD_NORM: np.full(steps, np.nan),
                 TRAIN_TOKENS: np.full(steps, 4096.0)}
        _write(store, PACKED, s, packed)
        _write(store, STUCK, s, stuck)
        for i, task in enumerate(TASKS):
            acc = 0.4 + 0.1 * i + 0.2 * evals / steps
            _write(store, PACKED, evals, {downstream_key(task, "acc"): acc,
                                          downstream_key(task, "acc", "stderr"): np.full(len(evals), 0.01)})
        _write(store, PACKED, evals, {heldout_key("c4_en", "loss"): loss[evals] + 0.05})
        _write(store, STUCK, evals[-1:], {heldout_key("c4_en", "loss"): loss[evals[-1:]] + 0.05,
                                          downstream_key(TASKS[0], "acc"): np.array([0.3])})
    return OddRuns(packed=PACKED, stuck=STUCK, steps=steps)


def _write(store, run: str, steps: np.ndarray, series: dict[str, np.ndarray]) -> None:
    store.write_metrics(run, pd.concat([pd.DataFrame({"step": steps, "key": key, "value": values})
                                        for key, values in series.items()], ignore_index=True))
