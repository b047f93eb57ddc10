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

import functools
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import TheilSenRegressor

from monitor.schema import (
    DATA_SEEN_2PLUS_FRACTION,
    HELDOUT_PREFIX,
    HELDOUT_TRAIN_GAP,
    TRAIN_LOSS,
    Clean,
    CleanRule,
    NotJudged,
    RunData,
    Story,
    VerdictRole,
)

from .base import CLEAN_Z, MEMORIZATION_VERDICT, Detector, Reads, ReferenceUse, severity_for
from .incremental import Incremental
from .eval_keys import heldout_sets
from .memorization import SUSPECT
from .rundata import finite, pinned
from .stats import MAD_TO_SIGMA, true_runs
from .train_windows import too_few_between, train_at


@dataclass
class MemorizationTrend(Detector, Incremental):
    name: ClassVar[str] = "memorization_trend"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.MEMORIZATION
    specificity: ClassVar[int] = 2
    explanation: ClassVar[str] = "memorization: held-out minus train loss widens within the run"
    judges: ClassVar[str] = "memorization within the run"
    clean_rule: ClassVar[CleanRule] = CleanRule.CLEAN_VERDICTS
    verdict: ClassVar[VerdictRole | None] = MEMORIZATION_VERDICT
    reads: ClassVar[Reads] = Reads(columns=(DATA_SEEN_2PLUS_FRACTION,), prefixes=(HELDOUT_PREFIX,), fields=("metric",))
    counts_from_zero: ClassVar[tuple[str, ...]] = ("skip_checkpoints",)

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
    max_base_checkpoints: int = 256
    """Largest base of a trend fit: checkpoints past 512 are all judged by the line through the
    first 256 usable ones, so what the watch service keeps of a run stays bounded."""

    def history_points(self, column: str) -> int | None:
        if column == self.metric:
            return None  # see keep_from
        return self.persist_checkpoints + 2

    def keep_from(self, run: RunData) -> dict[str, float]:
        """The last checkpoints and the train windows that end there (the base rows of the trend
        fits are carried instead, see `carry`)."""
        keep = super().keep_from(run)
        held = self.table(run)["step"].to_numpy()
        anchor = float(held[-(self.persist_checkpoints + 2)]) if held.size > self.persist_checkpoints + 1 else -np.inf
        train = finite(run, self.metric)
        before = train.index[train.index <= anchor]
        keep[self.metric] = float(before[-self.window_points]) if len(before) >= self.window_points else -np.inf
        return keep

    def carry(self, run: RunData, keep_from: dict[str, float], pinned: dict) -> dict:
        """The usable checkpoints the tail drops: the first `max_base_checkpoints` of them as rows
        (the bases of every later fit), the rest as a count (each judged checkpoint's place)."""
        table = self.table(run)
        held_from = min((v for k, v in keep_from.items() if k.startswith(HELDOUT_PREFIX)), default=-np.inf)
        leaving = table["step"].to_numpy() < held_from
        position = self.positions(table, run)
        base = list(pinned.get("memorization_trend:base", []))
        for step, gap, place in zip(table["step"][leaving], table["gap"][leaving], position[leaving]):
            if 0 <= place < self.max_base_checkpoints:
                base.append([int(step), float(gap)])
        pinned["memorization_trend:base"] = base
        pinned["memorization_trend:dropped_rows"] = int(pinned.get("memorization_trend:dropped_rows", 0) + leaving.sum())
        pinned["memorization_trend:dropped_usable"] = int(pinned.get("memorization_trend:dropped_usable", 0)
                                                          + ((position >= 0) & leaving).sum())
        return pinned

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

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        table = self.table(run)
        resid, sigma = self.residuals(run, table)
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
                                       severity_for(score, self.critical_ratio), message, evidence,
                                       known=steps[a + self.persist_checkpoints - 1]))
        return out

    def clean(self, run: RunData, reference: RunData | None = None) -> list[Clean]:
        """Judged checkpoints whose gap, less its 90% interval's half-width (the residual sigma),
        is back at or under its trend: the widening is gone there."""
        table = self.table(run)
        resid, sigma = self.residuals(run, table)
        band = np.fmax(self.min_effect, self.z_threshold * sigma)
        with np.errstate(invalid="ignore"):
            back = resid + CLEAN_Z * sigma <= band
        return [self._clean(run, HELDOUT_TRAIN_GAP, step, step, {"delta": float(r), "sigma": float(g),
                                                                 "band": float(b)})
                for step, r, g, b, ok in zip(table["step"], resid, sigma, band, back) if ok]

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        table = self.table(run)
        if table.empty:
            what = "held-out loss" if self.metric in run.scalars.columns else self.metric
            return [NotJudged(self.name, f"the run logs no {what}", HELDOUT_TRAIN_GAP)]
        if len(table) > self.skip_checkpoints and table["train"].iloc[self.skip_checkpoints:].isna().all():
            return [NotJudged(self.name, too_few_between(self.window_checkpoints), HELDOUT_TRAIN_GAP,
                              "train loss logged several times between held-out evaluations (against "
                              "a reference, memorization judges this cadence)")]
        usable = int(self.usable(table, run).sum())
        need = self.min_trend_checkpoints + 1
        if usable < need:
            return [NotJudged(self.name, f"{usable} usable checkpoint(s) (the first {self.skip_checkpoints} are left "
                              f"out); a trend needs {self.min_trend_checkpoints} before the first judged one",
                              HELDOUT_TRAIN_GAP, f"{need - usable} more checkpoints")]
        return []

    def usable(self, table: pd.DataFrame, run: RunData) -> np.ndarray:
        """Checkpoints with a gap, after the run's first `skip_checkpoints` checkpoints, where both
        losses fall too fast for a trend (counted with those the incremental tail no longer holds)."""
        dropped = int(pinned(run, "memorization_trend:dropped_rows") or 0)
        row = dropped + np.arange(len(table))
        return np.isfinite(table["gap"].to_numpy(dtype=float)) & (table["step"].to_numpy() > 0) \
            & (row >= self.skip_checkpoints)

    def positions(self, table: pd.DataFrame, run: RunData) -> np.ndarray:
        """Each usable row's place among the run's usable checkpoints (-1 for the others)."""
        usable = self.usable(table, run)
        dropped = int(pinned(run, "memorization_trend:dropped_usable") or 0)
        return np.where(usable, dropped + np.cumsum(usable) - 1, -1)

    def residuals(self, run: RunData, table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Residual of each checkpoint's gap from a trend fitted on earlier checkpoints only.

        Checkpoint i (counting usable ones over the whole run) is judged by a Theil-Sen line through
        the first b usable checkpoints: b = 2^k for 2^k <= i < 2^(k+1), at most
        `max_base_checkpoints`. The base is always the start of the history, never the judged
        checkpoint or what follows it. One fit per base keeps a run with thousands of checkpoints
        to a dozen fits, each made once (`_fit`).
        """
        steps, gap = table["step"].to_numpy(), table["gap"].to_numpy(dtype=float)
        resid = np.full(steps.size, np.nan)
        sigma = np.full(steps.size, np.nan)
        carried = pinned(run, "memorization_trend:base") or []
        mine = np.flatnonzero(self.usable(table, run))
        positions = self.positions(table, run)[mine]
        # Every usable checkpoint known, in order: the carried base rows, then this table's.
        base_steps = np.array([r[0] for r in carried] + steps[mine].tolist(), dtype=float)
        base_gaps = np.array([r[1] for r in carried] + gap[mine].tolist(), dtype=float)
        order = np.argsort(base_steps, kind="stable")
        base_steps, base_gaps = base_steps[order], base_gaps[order]
        base_steps, first = np.unique(base_steps, return_index=True)
        base_gaps = base_gaps[first]
        fits: dict[int, tuple[float, float, float]] = {}  # base size -> its fit, in this call
        for row, i in zip(mine, positions):
            if i < self.min_trend_checkpoints:
                continue
            b = min(1 << int(np.floor(np.log2(i))), self.max_base_checkpoints)
            if b < self.min_trend_checkpoints or base_steps.size < b:
                continue
            if b not in fits:
                fits[b] = _fit(base_steps[:b].tobytes(), base_gaps[:b].tobytes())
            intercept, slope, scale = fits[b]
            resid[row] = gap[row] - (intercept + slope * np.log(max(steps[row], 1)))
            sigma[row] = scale
        return resid, sigma


@functools.lru_cache(maxsize=256)
def _fit(steps_bytes: bytes, gaps_bytes: bytes) -> tuple[float, float, float]:
    """Theil-Sen line of the gap on ln(step): intercept, slope, and the robust sigma of its residuals.

    Given as the bytes of two float arrays, so that the fit of a base is kept: the watch service
    judges every poll's checkpoints against the same base, which stops growing at
    `max_base_checkpoints` and is then the costliest step of a poll."""
    steps, gaps = np.frombuffer(steps_bytes), np.frombuffer(gaps_bytes)
    x = np.log(np.maximum(steps, 1).astype(float)).reshape(-1, 1)
    # 2,000 random pairs instead of scikit-learn's 10,000: the slope is still known to far below the
    # noise of the gap, at a fifth of the cost on long runs.
    with warnings.catch_warnings():
        # On degenerate gaps (all equal) the spatial median stops at its iteration cap; the line
        # it has is still the right one.
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = TheilSenRegressor(max_subpopulation=2000, random_state=0).fit(x, gaps)
    r = gaps - fit.predict(x)
    return float(fit.intercept_), float(fit.coef_[0]), MAD_TO_SIGMA * float(np.median(np.abs(r - np.median(r))))
