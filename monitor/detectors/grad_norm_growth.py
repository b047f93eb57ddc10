"""Grad-norm growth: the grad norm climbs slowly and stays up, the precursor of a loss blow-up that
neither a spike rule (it is not sudden) nor the explosion rule of nonfinite (10x in three steps)
sees.

The grad norm is summarised in blocks of `block_points` logging intervals (medians, so spikes
cannot move them). After `warmup_blocks` (the grad norm falls from its initial high while the
learning rate warms up), a complete block whose median is at least `growth_ratio` times the lowest
earlier block median counts; `persist_blocks` consecutive counting blocks make a detection. Each
block is judged once the run has logged past it, against earlier blocks only, so a verdict never
changes as the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from monitor.schema import TRAIN_GRAD_NORM, Clean, CleanRule, NotJudged, RunData, Story

from .base import Detector, Reads, ReferenceUse, severity_for
from .incremental import Incremental
from .rundata import finite, logging_interval, pinned
from .stats import true_runs, window_summaries


@dataclass
class GradNormGrowth(Detector, Incremental):
    name: ClassVar[str] = "grad_norm_growth"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.INSTABILITY
    explanation: ClassVar[str] = "grad norm grows"
    judges: ClassVar[str] = "grad-norm growth"
    # A block is judged once 500 steps have passed it: steps judged past the last flagged block say
    # nothing until the next block is complete, so only a block judged below the ratio ends it.
    clean_rule: ClassVar[CleanRule] = CleanRule.CLEAN_VERDICTS
    reads: ClassVar[Reads] = Reads(fields=("metric",))
    counts_from_zero: ClassVar[tuple[str, ...]] = ("warmup_blocks",)

    metric: str = TRAIN_GRAD_NORM
    """The metric judged for slow growth."""
    block_points: int = 500
    """Logged steps per block: llm.c's grad norm has spikes to 7.5x its level for a step; a median
    of 500 steps does not move with them."""
    cadence_points: int = 32
    """The logging interval that sets the block width comes from the first 32 logged steps."""
    warmup_blocks: int = 2
    """Blocks left out of the baseline: llm.c's grad norm falls from 0.79 to 0.29 over its first
    2,000 steps (warmup to step 699), which would make any later level look low."""
    growth_ratio: float = 2.0
    """A block median twice the lowest earlier one counts. Not fitted: no calibration run logs a
    grad norm. On llm.c GPT-2 124M (the test half) the largest such ratio after warmup is 1.07; a
    grad norm that doubles while the learning rate decays is an instability, not a schedule."""
    persist_blocks: int = 2
    """Consecutive counting blocks that make a detection: 1,000 steps at the default."""
    critical_ratio: float = 2.0
    """Growth twice growth_ratio (4x at the default) is CRITICAL."""

    def history_points(self, column: str) -> int:
        # The blocks a run of counting blocks may reach back over, and the one still growing; the
        # lowest median of the blocks before them is carried (`carry`).
        return (self.persist_blocks + 2) * self.block_points

    def pin(self, run: RunData, pinned: dict) -> dict:
        pinned = super().pin(run, pinned)
        w, _ = self.blocks(run)
        if w is not None and len(w) and "grad_norm_growth:first_block" not in pinned:
            pinned["grad_norm_growth:first_block"] = int(w.ids[0])
        return pinned

    def carry(self, run: RunData, keep_from: dict[str, float], pinned: dict) -> dict:
        """The lowest usable block median among the blocks the tail drops: later blocks are judged
        against it."""
        w, complete = self.blocks(run)
        if w is None:
            return pinned
        dropped = w.last_step < keep_from.get(self.metric, -np.inf)
        lowest = self._usable(run, w, complete)[dropped]
        if np.isfinite(lowest).any():
            before = pinned.get("grad_norm_growth:lowest", np.inf)
            pinned["grad_norm_growth:lowest"] = float(min(before, np.nanmin(lowest)))
        return pinned

    def settled_before(self, run: RunData, first_new: float) -> float:
        interval = logging_interval(run, self.metric, self.cadence_points)
        return first_new - (self.block_points * interval if interval else 0.0)

    def blocks(self, run: RunData):
        x = finite(run, self.metric)
        x = x[x.to_numpy() > 0]
        interval = logging_interval(run, self.metric, self.cadence_points)
        if interval is None or x.empty:
            return None, None
        width = self.block_points * interval
        w = window_summaries(x.index.to_numpy(), x.to_numpy(dtype=float), width, medians_only=True)
        complete = ((w.ids + 1) * width - interval <= float(x.index[-1])) & (w.n >= self.block_points // 2)
        return w, complete

    def _usable(self, run: RunData, w, complete) -> np.ndarray:
        """Complete blocks' medians, NaN for the warmup blocks and incomplete ones."""
        first = pinned(run, "grad_norm_growth:first_block")
        first = int(w.ids[0]) if first is None else int(first)
        return np.where(complete & (w.ids >= first + self.warmup_blocks), w.median, np.nan)

    def ratios(self, run: RunData) -> pd.DataFrame:
        """Per block: its median, the lowest usable median before it and their ratio."""
        w, complete = self.blocks(run)
        if w is None:
            return pd.DataFrame({c: pd.Series(dtype=float) for c in ("first_step", "last_step", "median", "lowest",
                                                                       "ratio", "band", "complete")})
        usable = self._usable(run, w, complete)
        carried = pinned(run, "grad_norm_growth:lowest")
        lowest = np.fmin.accumulate(np.concatenate([[np.inf if carried is None else float(carried)], usable[:-1]]))
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(np.isfinite(lowest) & (lowest > 0), w.median / lowest, np.nan)
        return pd.DataFrame({"first_step": w.first_step, "last_step": w.last_step, "median": w.median,
                             "lowest": np.where(np.isfinite(lowest), lowest, np.nan), "ratio": ratio,
                             "band": self.growth_ratio, "complete": complete})

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        w, complete = self.blocks(run)
        if w is None:
            return []
        med = np.where(complete, w.median, np.nan)
        usable = self._usable(run, w, complete)
        carried = pinned(run, "grad_norm_growth:lowest")
        with np.errstate(invalid="ignore"):
            start = np.inf if carried is None else float(carried)
            lowest = np.fmin.accumulate(np.concatenate([[start], usable[:-1]]))
            ratio = np.where(np.isfinite(lowest) & (lowest > 0), med / lowest, np.nan)
            flag = ratio >= self.growth_ratio
        out = []
        for a, b in true_runs(flag):
            if b - a + 1 < self.persist_blocks:
                continue
            k = a + int(np.nanargmax(ratio[a:b + 1]))
            evidence = {"ratio": float(ratio[k]), "value": float(med[k]), "baseline": float(lowest[k]),
                        "band": self.growth_ratio, "blocks": int(b - a + 1), "n": int(w.n[a:b + 1].sum())}
            message = (f"{self.metric} median {med[k]:.3g} is {ratio[k]:.1f}x its lowest level since warmup "
                       f"({lowest[k]:.3g}) for {b - a + 1} blocks of {self.block_points} steps: a slow climb that "
                       f"comes before loss spikes and divergence")
            score = float(ratio[k] / self.growth_ratio)
            out.append(self._detection(run, None, self.metric, w.first_step[a], w.last_step[b], w.mid_step[k],
                                       score, severity_for(score, self.critical_ratio), message, evidence,
                                       known=w.last_step[a + self.persist_blocks - 1]))
        return out

    def clean(self, run: RunData, reference: RunData | None = None) -> list[Clean]:
        """Complete blocks past warmup whose median is under `growth_ratio` times the lowest before
        them: the grad norm is not growing there. The ratio is exact (a median of 500 steps), so the
        persistence of two such blocks (IncidentConfig.resolve_after_points) is the hysteresis."""
        table = self.ratios(run)
        with np.errstate(invalid="ignore"):
            ok = table["complete"].to_numpy(dtype=bool) & (table["ratio"].to_numpy(dtype=float) < self.growth_ratio)
        return [self._clean(run, self.metric, row.first_step, row.last_step, {"ratio": float(row.ratio),
                                                                               "band": self.growth_ratio})
                for row in table[ok].itertuples(index=False)]

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        if self.metric not in run.scalars.columns:
            return [NotJudged(self.name, f"the run logs no {self.metric}", self.metric)]
        w, complete = self.blocks(run)
        need = self.warmup_blocks + 1 + self.persist_blocks
        have = 0 if w is None else int(complete.sum())
        if have < need:
            return [NotJudged(self.name, f"{have} complete block(s) of {self.block_points} logged steps; a verdict "
                              f"needs {need} ({self.warmup_blocks} of warmup, a baseline, {self.persist_blocks} judged)",
                              self.metric, f"about {(need - have) * self.block_points} more logged steps")]
        return []
