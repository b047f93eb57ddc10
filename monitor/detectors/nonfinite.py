"""NaN/Inf values and an exploding grad norm.

A logged NaN or Inf in any metric is reported at its first step (consecutive non-finite values
of one metric form one interval). The grad norm is exploding when it stays at least
`explode_ratio` times its trailing median for `explode_min_points` consecutive logged steps: one
large spike that recovers is the spike detector's business, a norm that stays up is what comes
before a NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from monitor.schema import (
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    RunData,
    Severity,
    Story,
    VerdictRole,
)

from .base import Detector, ReferenceUse, StoryRole
from .incremental import Incremental
from .rundata import finite
from .stats import trailing_median, true_runs


@dataclass
class NonFiniteDetector(Detector, Incremental):
    name: ClassVar[str] = "nonfinite"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.INSTABILITY
    specificity: ClassVar[int] = 2
    explanation: ClassVar[str] = "NaN or Inf in the run"
    judges: ClassVar[str] = "NaN and Inf"
    verdict: ClassVar[VerdictRole] = VerdictRole(10, "nonfinite", "Run produced NaN/Inf")

    critical_metrics: tuple[str, ...] = (TRAIN_LOSS, TRAIN_GRAD_NORM)
    """A NaN/Inf in these is CRITICAL (training is lost); in any other metric a WARNING."""
    explode_metric: str = TRAIN_GRAD_NORM
    """The metric judged for explosion."""
    explode_ratio: float = 10.0
    """The largest real grad-norm spikes in our data (llm.c GPT-2 124M, steps 7,435 and 9,025)
    reach 5.3x and 7.5x the trailing median for one step and recover at once; 10x held for 3
    steps is beyond every real spike we have seen."""
    explode_min_points: int = 3
    """Logged steps in a row at explode_ratio or more: one large spike that recovers is a spike."""
    baseline_points: int = 500
    """Trailing median over the previous 500 logged steps: long enough that a burst of spikes does
    not lift it."""

    def history_points(self, column: str) -> int:
        # The trailing median's window, and the run of high values a new value may extend.
        return self.baseline_points + 2 * self.explode_min_points + 2

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        out = self._nonfinite(run)
        if self.explode_metric in run.scalars.columns:
            out.extend(self._exploding(run))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def _nonfinite(self, run: RunData) -> list:
        bad = _nonfinite_cells(run)
        out = []
        for key, group in bad.groupby("key", sort=True):
            logged = run.series(key)
            pos = logged.index.get_indexer(group["step"].to_numpy())
            mask = np.zeros(len(logged), dtype=bool)
            mask[pos[pos >= 0]] = True
            steps = logged.index.to_numpy()
            values = logged.to_numpy(dtype=float)
            for a, b in true_runs(mask):
                finite_before = np.flatnonzero(np.isfinite(values[:a]))
                last_ok = int(finite_before[-1]) if finite_before.size else None
                first = values[a]
                evidence = {
                    "rule": "nonfinite",
                    "n": int(b - a + 1),
                    "first_value": "nan" if np.isnan(first) else ("inf" if first > 0 else "-inf"),
                    "last_finite_step": int(steps[last_ok]) if last_ok is not None else None,
                    "last_finite_value": float(values[last_ok]) if last_ok is not None else None,
                }
                severity = Severity.CRITICAL if key in self.critical_metrics else Severity.WARNING
                message = f"{key} logged {evidence['first_value']} ({b - a + 1} non-finite value{'s' if b > a else ''})"
                out.append(self._detection(run, None, key, steps[a], steps[b], steps[a], float(b - a + 1),
                                           severity, message, evidence, known=steps[a]))
        return out

    def _trailing_baseline(self, x: pd.Series) -> pd.Series:
        """Median of the `baseline_points` values before each (from 32 of them on)."""
        med = trailing_median(x.to_numpy(dtype=float), self.baseline_points, min(32, self.baseline_points))
        return pd.Series(np.r_[np.nan, med[:-1]], index=x.index)

    def role(self, detection) -> StoryRole:
        """A grad norm that stays up is named for what it is, not as the NaN it often precedes."""
        base = super().role(detection)
        if detection.evidence.get("rule") == "exploding":
            return replace(base, explanation=f"{detection.metric} exploding")
        return base

    def _exploding(self, run: RunData) -> list:
        x = finite(run, self.explode_metric)
        if len(x) <= self.explode_min_points:
            return []
        base = self._trailing_baseline(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = (x / base).to_numpy()
        high = ratio >= self.explode_ratio
        steps = x.index.to_numpy()
        out = []
        for a, b in true_runs(high):
            if b - a + 1 < self.explode_min_points:
                continue
            k = a + int(np.nanargmax(ratio[a:b + 1]))
            evidence = {"rule": "exploding", "ratio": float(ratio[k]), "value": float(x.iloc[k]), "baseline": float(base.iloc[a]),
                        "n": int(b - a + 1)}
            message = (f"{self.explode_metric} exploding: {ratio[k]:.0f}x its trailing median for "
                       f"{b - a + 1} logged steps")
            out.append(self._detection(run, None, self.explode_metric, steps[a], steps[b], steps[k],
                                       float(ratio[k]), Severity.CRITICAL, message, evidence,
                                       known=steps[a + self.explode_min_points - 1]))
        return out


def _nonfinite_cells(run: RunData) -> pd.DataFrame:
    """(key, step) of every value the run logged as NaN or +-Inf."""
    parts = [run.logged_nonfinite[["key", "step"]]]
    for key in run.scalars.columns:  # column by column: no copy of a wide million-row frame
        rows = np.flatnonzero(np.isinf(run.scalars[key].to_numpy(dtype=float)))
        if rows.size:
            parts.append(pd.DataFrame({"key": key, "step": run.scalars.index[rows]}))
    return pd.concat(parts, ignore_index=True).drop_duplicates().sort_values(["key", "step"])
