"""Memorization within one run: the gap held-out minus train loss widens beyond its own trend.

No reference is needed. At each checkpoint the gap between the held-out loss (the median over the
sets the run logs) and the train loss (its median over the window ending there,
train_windows.train_at) is compared with its own trend: a Theil-Sen line (`TheilSenRegressor`) on
ln(step) fitted on the first 2^k usable checkpoints for checkpoints 2^k..2^(k+1)-1, always at least
the first half of the history, never the judged checkpoint or what follows it, so a memorizing
stretch cannot bend the line it is judged by and a verdict never changes later. Theil-Sen rather
than `HuberRegressor`: Huber's loss tames large residuals but not leverage, and the last
checkpoints sit at the far end of the log-step axis, exactly where a memorizing stretch would be.
A gap above the trend by more than max(`min_effect`, `z_threshold` x the residual sigma) at
`persist_checkpoints` consecutive checkpoints fires.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import TheilSenRegressor

from monitor.schema import DATA_SEEN_2PLUS_FRACTION, HELDOUT_PREFIX, HELDOUT_TRAIN_GAP, TRAIN_LOSS, NotJudged, RunData

from .base import Detector, ReferenceUse, severity_for
from .eval_keys import heldout_sets
from .memorization import SUSPECT
from .rundata import finite
from .stats import MAD_TO_SIGMA, true_runs
from .train_windows import train_at


@dataclass
class MemorizationTrend(Detector):
    name: ClassVar[str] = "memorization_trend"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE

    metric: str = TRAIN_LOSS
    """The train metric set against the held-out loss."""
    window_points: int = 100
    """Logged steps of train loss summarised at each checkpoint, at most."""
    window_checkpoints: int = 2
    """The train window reaches back at most this many intervals between checkpoints: a 100-step
    median lagged 50 steps behind held-out evals 10 steps apart and made a clean short run's gap
    widen by itself."""
    min_effect: float = 0.053
    """The widening that matters, in nats: 1.5 x the largest residual of a clean single run on the
    calibration half (0.035)."""
    z_threshold: float = 3.0
    """Residual sigmas the widening must also exceed."""
    persist_checkpoints: int = 2
    """Consecutive checkpoints above the trend that make a detection."""
    critical_ratio: float = 3.0
    """A widening three times min_effect is CRITICAL."""
    skip_checkpoints: int = 3
    """Checkpoints at the start of training, where train and held-out fall too fast for a trend,
    are left out of the fit."""
    min_trend_checkpoints: int = 8
    """Smallest base of a trend fit."""

    def columns(self, run: RunData) -> list[str]:
        return [c for c in run.scalars.columns
                if c == self.metric or c.startswith(HELDOUT_PREFIX) or c == DATA_SEEN_2PLUS_FRACTION]

    def table(self, run: RunData) -> pd.DataFrame:
        """Per held-out checkpoint: the held-out loss (median over sets), the train median and the gap."""
        keys = [st["loss"] for st in heldout_sets(run.scalars.columns).values() if "loss" in st]
        if not keys or self.metric not in run.scalars.columns:
            return pd.DataFrame({"step": pd.Series(dtype="int64"), "heldout": pd.Series(dtype=float),
                                 "train": pd.Series(dtype=float), "gap": pd.Series(dtype=float)})
        held = run.scalars[keys]
        held = held[np.isfinite(held.to_numpy(dtype=float)).any(axis=1)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            level = held.median(axis=1)
        steps = level.index.to_numpy()
        train = train_at(run, self.metric, steps, self.window_points, self.window_checkpoints)["train"].to_numpy()
        return pd.DataFrame({"step": steps, "heldout": level.to_numpy(dtype=float), "train": train,
                             "gap": level.to_numpy(dtype=float) - train})

    def explain(self, run: RunData, reference: RunData | None = None) -> pd.DataFrame:
        """The checkpoints, their gap, its trend and the band it had to clear."""
        table = self.table(run)
        resid, sigma = self.residuals(table, {})
        table["trend"] = table["gap"] - resid
        table["band"] = np.fmax(self.min_effect, self.z_threshold * sigma)
        return table

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        table = self.table(run)
        resid, sigma = self.residuals(table, {})
        band = np.fmax(self.min_effect, self.z_threshold * sigma)
        with np.errstate(invalid="ignore"):
            flag = resid > band
        steps, gap = table["step"].to_numpy(), table["gap"].to_numpy(dtype=float)
        out = []
        for a, b in true_runs(flag):
            if b - a + 1 < self.persist_checkpoints:
                continue
            k = a + int(np.nanargmax(resid[a:b + 1]))
            evidence = {"delta": float(resid[k]), "band": float(band[k]), "gap": float(gap[k]),
                        "trend_gap": float(gap[k] - resid[k]), "sigma": float(sigma[k]),
                        "z": float(resid[k] / sigma[k]) if sigma[k] > 0 else float("inf"), "n": int(b - a + 1)}
            repeated = finite(run, DATA_SEEN_2PLUS_FRACTION)
            if len(repeated) and repeated.index[0] <= steps[k]:
                evidence["seen_2plus_fraction"] = float(repeated.loc[:steps[k]].iloc[-1])
            message = (f"held-out minus train loss widened to {gap[k]:.3f}, {resid[k]:.3f} above its trend "
                       f"(had to clear {band[k]:.3f}): train loss keeps falling where held-out loss does not, "
                       f"{SUSPECT}")
            score = float(resid[k] / self.min_effect)
            out.append(self._detection(run, None, HELDOUT_TRAIN_GAP, steps[a], steps[b], steps[k], score,
                                       severity_for(score, self.critical_ratio), message, evidence))
        return out

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        table = self.table(run)
        if table.empty:
            what = "held-out loss" if self.metric in run.scalars.columns else self.metric
            return [NotJudged(self.name, f"the run logs no {what}", HELDOUT_TRAIN_GAP)]
        usable = int(self.usable(table).sum())
        need = self.min_trend_checkpoints + 1
        if usable < need:
            return [NotJudged(self.name, f"{usable} usable checkpoint(s) (the first {self.skip_checkpoints} are left "
                              f"out); a trend needs {self.min_trend_checkpoints} before the first judged one",
                              HELDOUT_TRAIN_GAP, f"{need - usable} more checkpoints")]
        return []

    def usable(self, table: pd.DataFrame) -> np.ndarray:
        ok = np.isfinite(table["gap"].to_numpy(dtype=float)) & (table["step"].to_numpy() > 0)
        ok[: self.skip_checkpoints] = False
        return ok

    def residuals(self, table: pd.DataFrame, fits: dict) -> tuple[np.ndarray, np.ndarray]:
        """Residual of each checkpoint's gap from a trend fitted on earlier checkpoints only.

        Checkpoint i (counting usable ones) is judged by a Theil-Sen line through the first 2^k
        usable checkpoints, 2^k <= i < 2^(k+1). One fit per doubling keeps a run with thousands of
        checkpoints to a dozen fits, and `fits` keeps them (intercept, slope, residual sigma, keyed
        by the size and last step of the base) across updates.
        """
        steps, gap = table["step"].to_numpy(), table["gap"].to_numpy(dtype=float)
        idx = np.flatnonzero(self.usable(table))
        resid = np.full(steps.size, np.nan)
        sigma = np.full(steps.size, np.nan)
        if idx.size <= self.min_trend_checkpoints:
            return resid, sigma
        x_all = np.log(np.maximum(steps, 1).astype(float)).reshape(-1, 1)
        k = int(np.ceil(np.log2(self.min_trend_checkpoints)))
        while (1 << k) < idx.size:
            base = idx[: 1 << k]
            judged = idx[1 << k: 1 << (k + 1)]
            tag = f"{1 << k}@{int(steps[base[-1]])}"
            if tag not in fits:
                # 2,000 random pairs instead of scikit-learn's 10,000: the slope is still known to
                # far below the noise of the gap, at a fifth of the cost on long runs.
                with warnings.catch_warnings():
                    # On degenerate gaps (all equal) the spatial median stops at its iteration
                    # cap; the line it has is still the right one.
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    fit = TheilSenRegressor(max_subpopulation=2000, random_state=0).fit(x_all[base], gap[base])
                r_base = gap[base] - fit.predict(x_all[base])
                scale = MAD_TO_SIGMA * float(np.median(np.abs(r_base - np.median(r_base))))
                fits[tag] = [float(fit.intercept_), float(fit.coef_[0]), scale]
            intercept, slope, scale = fits[tag]
            resid[judged] = gap[judged] - (intercept + slope * x_all[judged, 0])
            sigma[judged] = scale
            k += 1
        return resid, sigma
