"""Memorization measured inside each batch: the loss of records read before against first reads.

A trainer that knows which records of a batch it has read before (ours keeps a per-record read
counter in its train state) logs `data/batch_reread_fraction` and `train/reread_loss_gap`, the mean
loss of first reads minus that of re-reads, on the same parameters at the same step. No reference
and no seed enters it, so the run-to-run noise that hides memorization on small runs cannot either;
a clean run of at most one epoch has no re-read records and is never judged.

The steps where a batch held both kinds are cut into blocks of `window_points` logging intervals
(by step number, so a block's verdict does not depend on when the rows arrived; the interval is
that of the first `cadence_points` logged steps). A block with at least half its points is judged
once a row past it arrives: its median gap must exceed max(`min_effect`, `z_threshold` standard
errors, MAD and lag-1 autocorrelation accounted for); `persist_blocks` consecutive judged blocks
fire (metric `train/reread_loss_gap`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from monitor.schema import (
    DATA_BATCH_REREAD_FRACTION,
    TRAIN_REREAD_LOSS_GAP,
    CleanRule,
    NotJudged,
    RunData,
    Story,
    VerdictRole,
)

from .base import MEMORIZATION_VERDICT, Detector, Reads, ReferenceUse, severity_for
from .incremental import Incremental
from .memorization import SUSPECT
from .rundata import finite, logging_interval
from .stats import true_runs, window_summaries

COLUMNS = (DATA_BATCH_REREAD_FRACTION, TRAIN_REREAD_LOSS_GAP)
BLOCK_FIELDS = ("block", "first", "last", "gap", "se", "n", "reread")


@dataclass
class MemorizationReread(Detector, Incremental):
    name: ClassVar[str] = "memorization_reread"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.MEMORIZATION
    specificity: ClassVar[int] = 2
    explanation: ClassVar[str] = "memorization: re-read batches score lower than fresh ones"
    judges: ClassVar[str] = "memorization in re-read batches"
    clean_rule: ClassVar[CleanRule] = CleanRule.CLEAN_VERDICTS
    verdict: ClassVar[VerdictRole | None] = MEMORIZATION_VERDICT
    reads: ClassVar[Reads] = Reads(columns=COLUMNS)

    window_points: int = 100
    """Logged steps per block."""
    cadence_points: int = 32
    """The logging interval that sets the block width comes from the first 32 logged steps."""
    min_effect: float = 0.05
    """The gap that matters, in nats: at 0.05 nats re-reads are 5% likelier than first reads."""
    z_threshold: float = 3.0
    """Standard errors the block median must also exceed."""
    persist_blocks: int = 2
    """Consecutive judged blocks over the band that make a detection."""
    critical_ratio: float = 3.0
    """A gap three times min_effect is CRITICAL."""

    def history_points(self, column: str) -> int:
        # The blocks a run of judged blocks may reach back over, and the one still growing.
        return (self.persist_blocks + 2) * self.window_points

    def settled_before(self, run: RunData, first_new: float) -> float:
        return first_new - (self.width(run) or 0.0)

    def width(self, run: RunData) -> float | None:
        interval = logging_interval(run, TRAIN_REREAD_LOSS_GAP, self.cadence_points)
        return None if interval is None else self.window_points * interval

    def blocks(self, run: RunData) -> pd.DataFrame:
        """One row per judged block: number, first and last measured step, median gap, its standard
        error, measured steps and median re-read share. The block the run's last row is in may
        still grow and is left out."""
        width = self.width(run)
        gap, share = finite(run, TRAIN_REREAD_LOSS_GAP), finite(run, DATA_BATCH_REREAD_FRACTION)
        if width is None or gap.empty:
            return pd.DataFrame({c: pd.Series(dtype=float) for c in BLOCK_FIELDS})
        both = share[(share > 0) & (share < 1)]
        common = both.index.intersection(gap.index)
        steps = common.to_numpy()
        g = window_summaries(steps, gap.loc[common].to_numpy(dtype=float), width)
        s = window_summaries(steps, both.loc[common].to_numpy(dtype=float), width, medians_only=True)
        table = pd.DataFrame({"block": g.ids, "first": g.first_step, "last": g.last_step, "gap": g.median,
                              "se": g.median_se, "n": g.n, "reread": s.median})
        still_growing = np.floor(float(gap.index[-1]) / width)
        keep = (table["n"] >= max(5, self.window_points // 2)) & (table["block"] < still_growing)
        return table[keep].reset_index(drop=True)

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        table = self.blocks(run)
        if table.empty:
            return []
        gap, se = table["gap"].to_numpy(dtype=float), table["se"].to_numpy(dtype=float)
        band = np.fmax(self.min_effect, self.z_threshold * se)
        out = []
        for a, b in true_runs(gap > band):
            if b - a + 1 < self.persist_blocks:
                continue
            with np.errstate(divide="ignore"):
                z = np.where(se > 0, gap / se, np.inf)
            k = a + int(np.argmax(z[a:b + 1]))
            row = table.iloc[k]
            evidence = {"gap": float(gap[k]), "stderr": float(se[k]), "band": float(band[k]), "z": float(z[k]),
                        "delta": float(gap[k]), "reread_fraction": float(row["reread"]), "points": int(row["n"]),
                        "n": int(b - a + 1)}
            message = (f"records read before score {gap[k]:.3f} nats lower than first reads in the same batches "
                       f"({z[k]:.1f} standard errors; {row['reread']:.0%} of a batch re-read): the model "
                       f"remembers what it sees again, {SUSPECT}")
            score = float(gap[k] / self.min_effect)
            out.append(self._detection(run, None, TRAIN_REREAD_LOSS_GAP, table["first"].iloc[a],
                                       table["last"].iloc[b], row["last"], score,
                                       severity_for(score, self.critical_ratio), message, evidence,
                                       known=table["last"].iloc[a + self.persist_blocks - 1]))
        return out

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        if TRAIN_REREAD_LOSS_GAP not in run.scalars.columns:
            return [NotJudged(self.name, "the run does not log the loss of re-read against first-read records "
                              "(our trainer does; see README)", TRAIN_REREAD_LOSS_GAP)]
        if self.blocks(run).empty:
            return [NotJudged(self.name, "no complete block of batches that mixed re-read and first-read records "
                              "(a clean first epoch has none)", TRAIN_REREAD_LOSS_GAP)]
        return []
