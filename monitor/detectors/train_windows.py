"""Train loss summarised over the window of logged steps that ends at each checkpoint, so that it
can be set against the held-out loss evaluated there."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.schema import RunData

from .rundata import finite
from .stats import MAD_TO_SIGMA, MEDIAN_SE_FACTOR, effective_n, row_medians

MIN_WINDOW_POINTS = 5
"""Logged steps a window needs for a median and its error."""


def train_at(run: RunData, metric: str, steps: np.ndarray, window_points: int, window_checkpoints: int,
             other: RunData | None = None) -> pd.DataFrame:
    """Per checkpoint step: the median of `metric` (or of run - other, at the steps both logged)
    over the last `window_points` logged steps up to it, none older than `window_checkpoints`
    intervals between checkpoints (a median describes the middle of its window: on a run with
    evals every few dozen steps, 100 steps of train loss would describe training long before the
    held-out loss it is set against), or, for run - other, at least MIN_WINDOW_POINTS of them; its
    standard error (MAD and lag-1 autocorrelation), the median of `other` itself over the same
    window (the level the difference is relative to), and the points used. NaN where the window
    holds too few points."""
    x = finite(run, metric)
    level_src = None
    if other is not None:
        y = finite(other, metric)
        common = x.index.intersection(y.index)
        level_src = y.loc[common].to_numpy(dtype=float)
        x = x.loc[common] - y.loc[common]
    idx = x.index.to_numpy()
    vals = x.to_numpy(dtype=float)
    steps = np.asarray(steps)
    before = np.concatenate([[-np.inf], steps[:-1]]).astype(float)
    since = np.where(np.isfinite(before), steps - window_checkpoints * (steps - before), -np.inf)
    # The window of each checkpoint gathered into one row of a grid (NaN-padded where fewer
    # points precede it), so every checkpoint is summarised in one vectorised pass.
    hi = np.searchsorted(idx, steps, side="right")
    lo = np.searchsorted(idx, since, side="right")
    bounded = np.isfinite(since)
    n = hi - lo
    if other is not None:
        # A trainer that logs train loss hardly more often than it evaluates (HF Trainer with
        # logging_steps = eval_steps logs the mean since its last log) leaves fewer than
        # MIN_WINDOW_POINTS in those intervals. The difference of two runs of one recipe is flat
        # (their shared fall cancels), so a window reaching back to that many logged steps
        # describes it as well; a run's own train loss falls across such a window, and its
        # median would lag the held-out loss it is set against.
        n = np.maximum(n, np.minimum(MIN_WINDOW_POINTS, hi))
    n = np.minimum(n, window_points)
    pos = hi[:, None] - window_points + np.arange(window_points)[None, :]
    inside = pos >= (hi - n)[:, None]
    take = np.clip(pos, 0, None)
    grid = np.where(inside, vals[take] if vals.size else np.nan, np.nan)
    med = row_medians(grid)
    dev = grid - med[:, None]
    sigma = MAD_TO_SIGMA * row_medians(np.abs(dev))
    filled = np.nan_to_num(dev)
    power = np.sum(filled * filled, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(power > 0, np.sum(filled[:, 1:] * filled[:, :-1], axis=1) / power, 0.0)
        se = MEDIAN_SE_FACTOR * sigma / np.sqrt(effective_n(n, rho))
    # An unbounded window (the first checkpoint) must be half full; a bounded one needs only
    # enough points for a median.
    enough = (n >= MIN_WINDOW_POINTS) & (bounded | (n >= window_points // 2))
    out = pd.DataFrame({"step": steps, "train": np.where(enough, med, np.nan),
                        "train_se": np.where(enough, se, np.nan), "n": n})
    if level_src is not None:
        level_grid = np.where(inside, level_src[take] if level_src.size else np.nan, np.nan)
        out["level"] = np.where(enough, row_medians(level_grid), np.nan)
    return out


def too_few_between(window_checkpoints: int) -> str:
    """Why no checkpoint has a train window when train loss is logged hardly more often than
    held-out loss is evaluated: more checkpoints of that cadence would not help."""
    return (f"train loss is logged too seldom between held-out evaluations: the {window_checkpoints} intervals "
            f"before a checkpoint hold fewer than {MIN_WINDOW_POINTS} logged train steps, too few for the "
            f"median set against the held-out loss")
