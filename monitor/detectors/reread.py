"""Memorization measured inside each batch: the loss of records read before against first reads.

A trainer that knows which records of a batch it has read before (ours keeps a per-record read
counter in its train state) logs `data/batch_reread_fraction` and `train/reread_loss_gap`, the mean
loss of first reads minus that of re-reads, on the same parameters at the same step. No reference
and no seed enters it, so the run-to-run noise that hides memorization on small runs cannot either;
a clean run of at most one epoch has no re-read records and is never judged.

The steps where a batch held both kinds are cut into blocks of `width` steps (by step number, so a
block's verdict does not depend on when the rows arrived); a block with at least `min_points` such
steps is summarised by the median gap and its standard error (MAD, autocorrelation accounted for).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.schema import DATA_BATCH_REREAD_FRACTION, TRAIN_REREAD_LOSS_GAP, RunData

from .rundata import finite
from .stats import window_summaries

COLUMNS = (DATA_BATCH_REREAD_FRACTION, TRAIN_REREAD_LOSS_GAP)
BLOCK_FIELDS = ("block", "first", "last", "gap", "se", "n", "reread")


def measured(run: RunData) -> pd.DataFrame:
    """Steps whose batch held both first reads and re-reads: their gap and re-read share."""
    gap, share = finite(run, TRAIN_REREAD_LOSS_GAP), finite(run, DATA_BATCH_REREAD_FRACTION)
    both = share[(share > 0) & (share < 1)]
    common = both.index.intersection(gap.index)
    return pd.DataFrame({"gap": gap.loc[common].to_numpy(dtype=float),
                         "reread": both.loc[common].to_numpy(dtype=float)}, index=common)


def blocks(run: RunData, width: float, min_points: int, before: float = np.inf) -> pd.DataFrame:
    """One row per block of `width` steps that starts before step `before` and has `min_points`
    measured steps: block number, first and last measured step, median gap, its standard error,
    points and median re-read share."""
    m = measured(run)
    steps = m.index.to_numpy()
    gap = window_summaries(steps, m["gap"].to_numpy(), width)
    share = window_summaries(steps, m["reread"].to_numpy(), width, medians_only=True)
    table = pd.DataFrame({"block": gap.ids, "first": gap.first_step, "last": gap.last_step,
                          "gap": gap.median, "se": gap.median_se, "n": gap.n, "reread": share.median})
    keep = (table["n"] >= min_points) & (table["block"] * width < before)
    return table[keep].reset_index(drop=True)
