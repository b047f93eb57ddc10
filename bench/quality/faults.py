"""Faults injected into real runs with the shapes they have in real training, and the evaluation
cadences real pairs come with.

Every fault ramps in: it starts at 30% of the run and is full at 60% (the OLMo 3 reproduction's
train loss drifted below the reference over weeks, not in one step), except point faults (a spike,
a NaN, a stall), which sit at 70% of the run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.schema import (
    DATA_CURSOR,
    HELDOUT_PREFIX,
    PERF_STEP_TIME_S,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    EventKind,
    RunData,
)

ONSET, FULL, POINT = 0.3, 0.6, 0.7
# An improvement that generalises moves held-out loss by most of the train gain: 75% here.
IMPROVEMENT_FOLLOWS = 0.75


def onset_step(run: RunData) -> int:
    return int(ONSET * run.scalars.index[-1])


def ramp(steps: np.ndarray, last: float) -> np.ndarray:
    return np.clip((steps - ONSET * last) / ((FULL - ONSET) * last), 0.0, 1.0)


def _copy(run: RunData, name: str) -> RunData:
    out = copy.copy(run)
    out.info = copy.copy(run.info)
    out.info.name = name
    out.scalars = run.scalars.copy()
    return out


def _shift(run: RunData, name: str, train: float, heldout: float) -> RunData:
    out = _copy(run, name)
    s = out.scalars
    r = ramp(s.index.to_numpy(dtype=float), float(s.index[-1]))
    if TRAIN_LOSS in s:
        s[TRAIN_LOSS] = s[TRAIN_LOSS] + train * r
    for col in s.columns:
        if col.startswith(HELDOUT_PREFIX) and col.endswith(("/loss", "/bpb")):
            s[col] = s[col] + heldout * r
    return out


def memorization(gap: float) -> Callable[[RunData], RunData]:
    """Train loss drifts `gap` nats below where it was; held-out loss stays as it was."""
    return lambda run: _shift(run, run.name, -gap, 0.0)


def worse(gap: float) -> Callable[[RunData], RunData]:
    """Train and held-out loss both rise by `gap` nats."""
    return lambda run: _shift(run, run.name, gap, gap)


def improvement(gap: float) -> Callable[[RunData], RunData]:
    """Train loss falls by `gap`, held-out loss follows by IMPROVEMENT_FOLLOWS of it."""
    return lambda run: _shift(run, run.name, -gap, -IMPROVEMENT_FOLLOWS * gap)


def _point(run: RunData, metric: str) -> int:
    steps = run.series(metric).index
    return int(steps[np.searchsorted(steps, POINT * steps[-1])])


def spike(run: RunData) -> RunData:
    """The train loss doubles for one step."""
    out = _copy(run, run.name)
    at = _point(run, TRAIN_LOSS)
    out.scalars.loc[at, TRAIN_LOSS] *= 2.0
    return out


def nan(run: RunData) -> RunData:
    """One train loss is NaN (logged as such)."""
    out = _copy(run, run.name)
    at = _point(run, TRAIN_LOSS)
    out.scalars.loc[at, TRAIN_LOSS] = np.nan
    out.logged_nonfinite = pd.concat([run.logged_nonfinite, pd.DataFrame(
        {"key": [TRAIN_LOSS], "step": [at], "value": [np.nan]})], ignore_index=True)
    return out


def stall(run: RunData) -> RunData:
    """One step takes 20 times as long (a 20x stall: seconds on these runs)."""
    out = _copy(run, run.name)
    at = _point(run, PERF_STEP_TIME_S)
    out.scalars.loc[at, PERF_STEP_TIME_S] *= 20.0
    return out


# Records per step of the data-loader faults' cursor (the corpus runs log no data-loader state).
DATA_BATCH = 8


def _with_cursor(run: RunData) -> tuple[RunData, int]:
    """The run with a healthy data cursor at every step (the records consumed before it), and the
    step a point fault is injected at."""
    out = _copy(run, run.name)
    out.info.global_batch_size = DATA_BATCH
    steps = out.scalars.index.to_numpy()
    out.scalars[DATA_CURSOR] = (steps * DATA_BATCH).astype(float)
    return out, _point(run, TRAIN_LOSS)


def data_skip(run: RunData) -> RunData:
    """From the point on, the loader is one batch ahead of where the steps say it should be (it
    skipped a batch), and stays so."""
    out, at = _with_cursor(run)
    out.scalars.loc[out.scalars.index >= at, DATA_CURSOR] += DATA_BATCH
    return out


def resume_off_by_one(run: RunData) -> RunData:
    """A resume at the point restores the model at step N+1 and the loader at batch N (the OLMo 3
    reproduction's bug): a resume event says so, and the cursor is one batch behind from then on."""
    out, at = _with_cursor(run)
    out.scalars.loc[out.scalars.index > at, DATA_CURSOR] -= DATA_BATCH
    out.events = pd.DataFrame({"step": [at], "kind": [EventKind.RESUME.value], "attempt": [1],
                               "payload": [{"restored_step": at + 1, "restored_data_position": at * DATA_BATCH,
                                            "global_batch_size": DATA_BATCH}]})
    return out


def grad_growth(run: RunData) -> RunData:
    """The grad norm grows to three times its level over the ramp, and stays there."""
    out = _copy(run, run.name)
    s = out.scalars
    r = ramp(s.index.to_numpy(dtype=float), float(s.index[-1]))
    s[TRAIN_GRAD_NORM] = s[TRAIN_GRAD_NORM] * (1.0 + 2.0 * r)
    return out


# --- cadences ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cadence:
    """How the two runs of a pair log their held-out evaluations."""

    name: str
    description: str
    lag_steps: int = 0
    """Held-out rows of the run reach the store this many steps after their step (an offline job)."""


CADENCES = (
    Cadence("same", "both evaluate at the same steps"),
    Cadence("ref 2x less", "the reference evaluates every 2nd checkpoint of the run"),
    Cadence("ref 4x less", "the reference evaluates every 4th checkpoint of the run"),
    Cadence("ref 2x more", "the run evaluates every 2nd checkpoint of the reference"),
    Cadence("offset", "both every 2nd checkpoint, the reference half an interval later"),
    Cadence("stderr logged", "both log a held-out standard error (0.002)"),
    Cadence("tokens", "the reference has twice the global batch: its step k is the run's 2k"),
    Cadence("late evals", "the run's held-out evaluations arrive two eval intervals late"),
    Cadence("train at evals", "both log train loss only when they evaluate, as the mean since the last "
            "log (HF Trainer with logging_steps = eval_steps)"),
    Cadence("train every 25", "both log train loss every 25 steps, the mean since the last log (HF "
            "Trainer's logging_steps, Megatron's log interval)"),
)
# Steps between the train-loss logs of the "train every 25" cadence.
TRAIN_LOG_EVERY = 25
CADENCE_NAMES = tuple(c.name for c in CADENCES)


def heldout_keys(run: RunData) -> list[str]:
    return [c for c in run.scalars.columns if c.startswith(HELDOUT_PREFIX)]


def thin_evals(run: RunData, every: int, phase: int = 0) -> RunData:
    """Keep every `every`-th held-out checkpoint (counting those after step 0), from `phase`."""
    out = _copy(run, run.name)
    keys = heldout_keys(out)
    if not keys:
        return out
    held = out.scalars[keys]
    steps = held.index[np.isfinite(held.to_numpy(dtype=float)).any(axis=1) & (held.index > 0)]
    drop = steps[(np.arange(steps.size) % every) != phase]
    out.scalars.loc[drop, keys] = np.nan
    return out


def with_stderr(run: RunData, se: float = 0.002) -> RunData:
    out = _copy(run, run.name)
    for key in [k for k in heldout_keys(out) if k.endswith("/loss")]:
        logged = np.isfinite(out.scalars[key].to_numpy(dtype=float))
        out.scalars[key.removesuffix("/loss") + "/stderr"] = np.where(logged, se, np.nan)
    return out


def double_batch(run: RunData) -> RunData:
    """The same run as if it had twice the global batch: step 2k becomes step k (odd steps gone),
    twice the tokens per step."""
    out = _copy(run, run.name)
    s = out.scalars
    even = s[s.index % 2 == 0]
    even.index = pd.Index(even.index // 2, dtype="int64", name="step")
    out.scalars = even
    out.info.tokens_per_step = 2 * (run.info.tokens_per_step or 1.0)
    out.logged_nonfinite = run.logged_nonfinite.iloc[0:0]
    return out


def train_at_evals(run: RunData) -> RunData:
    """Train loss logged only at the held-out evaluations, each value the mean of the steps since the
    one before (what HF Trainer logs when logging_steps = eval_steps)."""
    out = _copy(run, run.name)
    s = out.scalars
    keys = heldout_keys(out)
    if TRAIN_LOSS not in s or not keys:
        return out
    held = s[keys]
    evals = held.index[np.isfinite(held.to_numpy(dtype=float)).any(axis=1) & (held.index > 0)]
    train = s[TRAIN_LOSS].dropna()
    interval = np.searchsorted(evals.to_numpy(), train.index.to_numpy(), side="left")
    inside = interval < evals.size  # steps after the last evaluation are never logged
    means = train[inside].groupby(interval[inside]).mean()
    s[TRAIN_LOSS] = np.nan
    s.loc[evals[means.index.to_numpy()], TRAIN_LOSS] = means.to_numpy()
    return out


def train_every(run: RunData, every: int = TRAIN_LOG_EVERY) -> RunData:
    """Train loss logged every `every` steps, each value the mean of the steps since the last log
    (what HF Trainer logs with logging_steps = `every`); a last partial interval is logged too."""
    out = _copy(run, run.name)
    s = out.scalars
    if TRAIN_LOSS not in s:
        return out
    train = s[TRAIN_LOSS].dropna()
    interval = (train.index.to_numpy() - 1) // every
    means = train.groupby(interval).mean()
    logged_at = train.index.to_series().groupby(interval).max()
    s[TRAIN_LOSS] = np.nan
    s.loc[logged_at.to_numpy(), TRAIN_LOSS] = means.to_numpy()
    return out


def apply_cadence(cadence: str, run: RunData, reference: RunData) -> tuple[RunData, RunData]:
    if cadence in ("same", "late evals"):
        return run, reference
    if cadence == "ref 2x less":
        return run, thin_evals(reference, 2)
    if cadence == "ref 4x less":
        return run, thin_evals(reference, 4)
    if cadence == "ref 2x more":
        return thin_evals(run, 2), reference
    if cadence == "offset":
        return thin_evals(run, 2, 0), thin_evals(reference, 2, 1)
    if cadence == "train at evals":
        return train_at_evals(run), train_at_evals(reference)
    if cadence == "train every 25":
        return train_every(run), train_every(reference)
    if cadence == "stderr logged":
        return with_stderr(run), with_stderr(reference)
    if cadence == "tokens":
        if not run.info.tokens_per_step:
            run = _copy(run, run.name)
            run.info.tokens_per_step = 1.0
        return run, double_batch(reference)
    raise ValueError(f"unknown cadence {cadence!r}")
