"""Downstream-eval regressions, per task and over all tasks, only where significant.

Against the reference, at every checkpoint both runs evaluated:

* per metric with error bars (logged `/stderr`, or binomial from `/n` for proportions), the
  two-proportion z = (run - reference) / sqrt(se_run^2 + se_ref^2), turned so that negative
  means worse. A regression needs z below the one-sided Bonferroni bound for the number of
  metrics compared (family-wise `alpha`), a relative drop of at least `min_relative_effect`, and
  `persist_checkpoints` consecutive checkpoints.
* over all tasks, the mean relative advantage (one vote per task; see
  eval_keys.downstream_aggregate) with its z from the error bars, or, without error bars, the
  t statistic of the per-task values; again with the effect floor and persistence.

Within the run (for metrics the reference does not log, or without a reference), a metric
whose current value is worse than its best earlier value (on a 3-checkpoint running median, so
one lucky eval is not the yardstick, and only among values significantly better than the first
evaluation, since early evals wander around chance) by both the z bound and the effect floor has
regressed since that checkpoint.

Metrics without a better direction (bias scores) are left alone.

A checkpoint is clean (the regression is gone) where the run is shown not worse than its yardstick
by the effect floor: the lower end of the relative difference's 90% interval lies above minus the
floor. Against the reference, a checkpoint whose whole interval lies within the floor also shows
the two runs alike (`Clean.reference`, which a report's "tied" needs); a run far ahead is not worse,
but not alike either.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import stats as sps

from monitor.schema import (
    DOWNSTREAM_PREFIX,
    Clean,
    CleanRule,
    NotJudged,
    RunData,
    Section,
    Severity,
    Story,
    VerdictRole,
)

from .base import CLEAN_Z, Detector, Reads
from .incremental import Incremental
from .eval_keys import (
    DownstreamMetric,
    downstream_aggregate,
    downstream_metrics,
    matching_steps,
    oriented_difference,
    stderr_of,
)
from .rundata import finite, pinned
from .stats import signed_runs, true_runs


@dataclass
class EvalRegression(Detector, Incremental):
    name: ClassVar[str] = "eval_regression"
    story: ClassVar[Story] = Story.DIVERGENCE
    explanation: ClassVar[str] = "downstream evals regressed"
    judges: ClassVar[str] = "downstream evals against the reference"
    clean_rule: ClassVar[CleanRule] = CleanRule.CLEAN_VERDICTS
    shown_in: ClassVar[tuple[Section, ...]] = (Section.DOWNSTREAM,)
    verdict: ClassVar[VerdictRole] = VerdictRole(70, "evals_regressed", "Downstream evals regressed")
    reads: ClassVar[Reads] = Reads(prefixes=(DOWNSTREAM_PREFIX,))

    alpha: float = 0.05
    """Family-wise error rate over all metrics compared at one checkpoint (Bonferroni)."""
    min_relative_effect: float = 0.03
    """Relative drop that matters. OLMo ladder run vs rerun differ per task by up to ~6% in the
    second half of training (boolq) and on average across tasks by under 1%."""
    min_aggregate_effect: float = 0.02
    """Over all tasks the floor is lower (averaging cancels task noise): 2% of the level."""
    persist_checkpoints: int = 2
    """Consecutive worse checkpoints that make a detection: one bad eval is not a regression."""
    within_run: bool = True
    """Also judge metrics the reference does not log against the run's own best."""
    best_smoothing: int = 3
    """Running median over this many checkpoints before taking the best earlier value."""

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        metrics = downstream_metrics(run.scalars.columns)
        if not metrics:
            return []
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices mean "no error bars"
            if reference is not None:
                theirs = {m.key for m in downstream_metrics(reference.scalars.columns)}
                shared = [m for m in metrics if m.key in theirs]
                bound = sps.norm.isf(self.alpha / max(len(shared), 1))
                for m in shared:
                    out.extend(self._per_task(run, reference, m, bound))
                out.extend(self._aggregate(run, reference, shared))
            if self.within_run:
                # Against its own past only where there is no reference to compare with.
                theirs = set() if reference is None else set(reference.scalars.columns)
                alone = [m for m in metrics if m.key not in theirs]
                for m in alone:
                    out.extend(self._within(run, m, self._bound(run, m)))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def clean(self, run: RunData, reference: RunData | None = None) -> list[Clean]:
        """Checkpoints shown not worse than the reference (per task, over all tasks), or than the
        run's own best (metrics the reference does not log), by the effect floor."""
        metrics = downstream_metrics(run.scalars.columns)
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            theirs = set() if reference is None else set(reference.scalars.columns)
            shared = [m for m in metrics if m.key in theirs]
            for m in shared:
                steps = matching_steps(run, reference, m.key)
                d, se, f = oriented_difference(run, reference, m, steps)
                out += self._cleans(run, reference, m.key, steps, d / np.abs(f), se / np.abs(f), CLEAN_Z,
                                    self.min_relative_effect)
            if shared:
                steps = np.unique(np.concatenate([matching_steps(run, reference, m.key) for m in shared]))
                agg = downstream_aggregate(run, reference, steps)
                agg = agg[agg["tasks"] >= 2]
                n = agg["tasks"].to_numpy(dtype=float)
                # Normal where error bars were logged, Student t across tasks otherwise (as _aggregate).
                q = np.where(agg["logged"].to_numpy(dtype=bool), CLEAN_Z, sps.t.isf(0.05, np.maximum(n - 1, 1)))
                out += self._cleans(run, reference, "eval/downstream/all", agg["step"].to_numpy(),
                                    agg["mean_rel"].to_numpy(dtype=float), agg["se"].to_numpy(dtype=float), q,
                                    self.min_aggregate_effect)
            if self.within_run:
                for m in (m for m in metrics if m.key not in theirs):
                    frame = self.within_frame(run, m, self._bound(run, m))
                    if frame is None:
                        continue
                    best = np.abs(frame["best"].to_numpy(dtype=float))
                    gap = (frame["v"] - frame["best"]).to_numpy(dtype=float)
                    se = np.hypot(frame["se"].to_numpy(dtype=float), frame["best_se"].to_numpy(dtype=float))
                    out += self._cleans(run, None, m.key, frame["step"].to_numpy(), gap / best, se / best, CLEAN_Z,
                                        self.min_relative_effect)
        return out

    def _cleans(self, run: RunData, reference: RunData | None, metric: str, steps, rel, rel_se, q, floor: float):
        """The checkpoints whose relative difference `rel` (positive: the run better), with its
        one-sided interval `q` x `rel_se`, lies above -`floor`; alike where it lies within +-`floor`."""
        with np.errstate(invalid="ignore"):
            not_worse = rel - q * rel_se >= -floor
            alike = np.abs(rel) + q * rel_se <= floor
        return [self._clean(run, metric, s, s, {"relative": float(r), "stderr": float(e), "band": floor},
                            alike_to=reference if same else None)
                for s, r, e, ok, same in zip(steps, rel, rel_se, not_worse, alike) if ok]

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        metrics = downstream_metrics(run.scalars.columns)
        if not metrics:
            return [NotJudged(self.name, "the run logs no downstream evals")]
        out = []
        theirs = set() if reference is None else {m.key for m in downstream_metrics(reference.scalars.columns)}
        shared = [m for m in metrics if m.key in theirs]
        if reference is not None and not shared:
            out.append(NotJudged(self.name, "the run and the reference share no downstream metric; the run is judged "
                                 "against its own best only"))
        if shared:
            paired = max(matching_steps(run, reference, m.key).size for m in shared)
            if paired < self.persist_checkpoints:
                out.append(NotJudged(
                    self.name, f"{paired} evaluation(s) at steps the reference evaluated too; a regression against "
                               f"it is {self.persist_checkpoints} worse evaluations in a row",
                    needs=f"{self.persist_checkpoints - paired} more evaluation(s) at the reference's steps"))
        alone = [m for m in metrics if m.key not in theirs]
        if self.within_run and alone:
            # A regression within the run falls from a best (a running median of `best_smoothing`
            # evaluations) for `persist_checkpoints` evaluations after it.
            evaluations = max(finite(run, m.key).size for m in alone)
            least = self.best_smoothing + self.persist_checkpoints
            if evaluations < least:
                which = "downstream evaluation(s)" if reference is None else \
                    "evaluation(s) of the metrics the reference does not log"
                out.append(NotJudged(
                    self.name, f"{evaluations} {which}; a regression within the run is "
                               f"{self.persist_checkpoints} evaluations below its best (a median of "
                               f"{self.best_smoothing})",
                    needs=f"{least - evaluations} more evaluation(s)"))
        return out

    # --- per task vs reference -----------------------------------------------------------------------
    def _per_task(self, run, reference, m: DownstreamMetric, bound: float) -> list:
        steps = matching_steps(run, reference, m.key)
        if steps.size < self.persist_checkpoints:
            return []
        d, se, f = oriented_difference(run, reference, m, steps)
        if not np.isfinite(se).any():
            return []
        with np.errstate(invalid="ignore", divide="ignore"):
            z = d / se
            rel = d / np.abs(f)
        flag = (z < -bound) & (rel < -self.min_relative_effect)
        out = []
        for a, b in signed_runs(flag, -np.ones_like(z), None, self.persist_checkpoints):
            k = a + int(np.argmin(z[a:b + 1]))
            evidence = {"delta": float(d[k]), "relative": float(rel[k]), "stderr": float(se[k]), "z": float(z[k]),
                        "p_value": float(sps.norm.cdf(z[k])), "z_bound": float(-bound),
                        "reference_value": float(f[k]), "n": int(b - a + 1), "lower_is_better": m.lower_is_better}
            message = (f"{m.task} {m.metric} {abs(rel[k]):.1%} worse than the reference (z={z[k]:.1f}, "
                       f"bound {-bound:.1f}) at {b - a + 1} checkpoints")
            out.append(self._detection(run, reference, m.key, steps[a], steps[b], steps[k], float(-z[k]),
                                       Severity.WARNING, message, evidence,
                                       known=steps[a + self.persist_checkpoints - 1]))
        return out

    # --- all tasks vs reference --------------------------------------------------------------------
    def _aggregate(self, run, reference, shared: list[DownstreamMetric]) -> list:
        if not shared:
            return []
        steps = np.unique(np.concatenate([matching_steps(run, reference, m.key) for m in shared]))
        agg = downstream_aggregate(run, reference, steps)
        agg = agg[agg["tasks"] >= 2].reset_index(drop=True)
        if len(agg) < self.persist_checkpoints:
            return []
        mean, z, n = agg["mean_rel"].to_numpy(float), agg["z"].to_numpy(float), agg["tasks"].to_numpy()
        # One-sided bound: normal where error bars were logged, Student t across tasks otherwise
        # (the t bound is the larger, so it is the safe choice for both).
        bound = sps.t.isf(self.alpha, np.maximum(n - 1, 1))
        with np.errstate(invalid="ignore"):
            flag = (z < -bound) & (mean < -self.min_aggregate_effect)
        out = []
        s = agg["step"].to_numpy()
        for a, b in signed_runs(flag, -np.ones_like(z), None, self.persist_checkpoints):
            k = a + int(np.argmin(mean[a:b + 1]))
            evidence = {"delta": float(mean[k]), "z": float(z[k]), "z_bound": float(-bound[k]),
                        "tasks": int(n[k]), "n": int(b - a + 1), "band": -self.min_aggregate_effect}
            message = (f"downstream evals {abs(mean[k]):.1%} worse than the reference on average over "
                       f"{int(n[k])} tasks (z={z[k]:.1f}) at {b - a + 1} checkpoints")
            out.append(self._detection(run, reference, "eval/downstream/all", s[a], s[b], s[k], float(-z[k]),
                                       Severity.WARNING, message, evidence, known=s[a + self.persist_checkpoints - 1]))
        return out

    # --- within the run ----------------------------------------------------------------------------
    def history_points(self, column: str) -> int:
        # The running median's window and a run of worse checkpoints; the first evaluation and the
        # best so far of the checkpoints the tail drops are carried (`pin`, `carry`).
        return self.best_smoothing + self.persist_checkpoints + 2

    def pin(self, run: RunData, pinned: dict) -> dict:
        for m in downstream_metrics(run.scalars.columns):
            key = f"eval_regression:first:{m.key}"
            x = finite(run, m.key)
            if key not in pinned and len(x):
                se = stderr_of(run, m, x.index.to_numpy()[:1])
                pinned[key] = [float(x.iloc[0]), float(se[0])]
        return pinned

    def carry(self, run: RunData, keep_from: dict[str, float], pinned: dict) -> dict:
        """The best running median of the checkpoints the tail drops, per metric."""
        for m in downstream_metrics(run.scalars.columns):
            frame = self.within_frame(run, m, self._bound(run, m))
            if frame is None:
                continue
            dropped = frame[(frame["step"] < keep_from.get(m.key, -np.inf)) & np.isfinite(frame["smooth"])]
            key = f"eval_regression:best:{m.key}"
            best = pinned.get(key)
            if len(dropped):
                top = dropped.loc[dropped["smooth"].idxmax()]
                if best is None or top["smooth"] > best[0]:
                    pinned[key] = [float(top["smooth"]), float(top["se"]), int(top["step"])]
        return pinned

    def _bound(self, run: RunData, m: DownstreamMetric) -> float:
        """The within-run z bound: Bonferroni over every downstream metric the run logs (the same
        whether or not a reference logs some of them, so what the incremental mode carries holds)."""
        return sps.norm.isf(self.alpha / max(len(downstream_metrics(run.scalars.columns)), 1))

    def within_frame(self, run: RunData, m: DownstreamMetric, bound: float) -> pd.DataFrame | None:
        """Per checkpoint of `m` (turned so that up is better): the value, its error, the running
        median where it is significantly better than the first evaluation, and the best such median
        before it (with its error and step), including what the incremental mode carried."""
        x = finite(run, m.key)
        if x.empty:
            return None
        steps = x.index.to_numpy()
        sign = -1.0 if m.lower_is_better else 1.0
        v = sign * x.to_numpy(dtype=float)
        se = stderr_of(run, m, steps)
        first = pinned(run, f"eval_regression:first:{m.key}")
        v0, se0 = (sign * first[0], first[1]) if first is not None else (v[0], se[0])
        smooth = pd.Series(v).rolling(self.best_smoothing).median().to_numpy()
        # A "best" must be significantly better than the first evaluation (the untrained model):
        # early evals wander around chance, and falling back from a lucky draw at chance level
        # is not a regression.
        with np.errstate(invalid="ignore"):
            learned = (smooth - v0) / np.sqrt(se ** 2 + se0 ** 2) > bound
        smooth = np.where(learned, smooth, np.nan)
        carried = pinned(run, f"eval_regression:best:{m.key}")
        best_value = np.full(v.size, np.nan)
        best_se = np.full(v.size, np.nan)
        best_step = np.full(v.size, -1, dtype=np.int64)
        top, top_se, top_step = (carried if carried is not None else (-np.inf, np.nan, -1))
        for i in range(v.size):  # the best before each checkpoint
            if np.isfinite(top):
                best_value[i], best_se[i], best_step[i] = top, top_se, top_step
            if np.isfinite(smooth[i]) and smooth[i] > top:
                top, top_se, top_step = smooth[i], se[i], int(steps[i])
        return pd.DataFrame({"step": steps, "value": x.to_numpy(dtype=float), "v": v, "se": se, "smooth": smooth,
                             "best": best_value, "best_se": best_se, "best_step": best_step})

    def _within(self, run: RunData, m: DownstreamMetric, bound: float) -> list:
        frame = self.within_frame(run, m, bound)
        if frame is None or len(frame) < self.persist_checkpoints or not np.isfinite(frame["se"]).any():
            return []
        steps = frame["step"].to_numpy()
        sign = -1.0 if m.lower_is_better else 1.0
        v, se, best = (frame[c].to_numpy(dtype=float) for c in ("v", "se", "best"))
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = v - best
            z = gap / np.sqrt(se ** 2 + frame["best_se"].to_numpy(dtype=float) ** 2)
            rel = gap / np.abs(best)
        flag = (z < -bound) & (rel < -self.min_relative_effect)
        out = []
        for a, b in true_runs(flag):
            if b - a + 1 < self.persist_checkpoints:
                continue
            k = a + int(np.argmin(z[a:b + 1]))
            best_step = int(frame["best_step"].iloc[k])
            evidence = {"delta": float(sign * gap[k]), "relative": float(rel[k]), "z": float(z[k]),
                        "z_bound": float(-bound), "best_step": best_step, "best_value": float(sign * best[k]),
                        "value": float(frame["value"].iloc[k]), "stderr": float(se[k]), "n": int(b - a + 1)}
            message = (f"{m.task} {m.metric} regressed {abs(rel[k]):.1%} since its best at step {best_step} "
                       f"({sign * best[k]:.4g} -> {frame['value'].iloc[k]:.4g}, z={z[k]:.1f})")
            out.append(self._detection(run, None, m.key, steps[a], steps[b], steps[k], float(-z[k]),
                                       Severity.WARNING, message, evidence,
                                       known=steps[a + self.persist_checkpoints - 1]))
        return out
