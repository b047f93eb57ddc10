"""Throughput: stalls, periodic pauses, MFU / tokens-per-second drops, and goodput.

Step times follow the goodput convention of AI-Hypercomputer/ml-goodput-measurement: within a
block of `block_points` steps, the ideal step time is the mean of the step times at most
median + 3 MAD (unscaled MAD), and a step above median + 3 MAD is anomalous. Each step is judged
against the previous complete block (the first block against itself), so the verdict on a step
never changes as later rows arrive.

* Stall: an anomalous step at least `stall_ratio` times the ideal (consecutive ones form one)
  that loses at least `min_stall_s` seconds.
* Periodic pauses: anomalous steps `pause_excess` over the ideal, at a near-constant spacing (garbage collection, synchronous
  checkpoints, evaluation), reported once with their period and the time they cost.
* Drops: the median of `perf/mfu` or `perf/tokens_per_s` over `drop_block_points` steps falls
  more than `drop_fraction` below the median of the preceding `baseline_blocks` such medians
  (the run's own baseline) for `persist_blocks` blocks; and against the reference, where it
  logs the same metric, block by block on the aligned axis.
* Goodput: sum of ideal step times over the sum of actual step times; below `min_goodput` it is
  reported for the whole run (once it has at least `block_points` steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from monitor.schema import PERF_MFU, PERF_STEP_TIME_S, PERF_TOKENS_PER_S, NotJudged, RunData, Severity

from .base import Detector
from .rundata import finite
from .stats import cadence, signed_runs, true_runs, window_summaries


@dataclass
class ThroughputDetector(Detector):
    name: ClassVar[str] = "throughput"

    block_points: int = 1000
    """The goodput library computes the ideal over the whole job; blocks of 1,000 steps let the
    ideal follow real changes (a new sequence length, a resized job) in long runs."""
    mad_factor: float = 3.0
    """ml-goodput-measurement: a step time above median + 3 MAD is not "normal"."""
    stall_ratio: float = 2.0
    """An anomalous step that takes twice the ideal is a stall (small MADs in very steady runs
    would otherwise call a few percent of jitter one)..."""
    min_stall_s: float = 1.0
    """...and that loses at least a second: a busy host makes a 60 ms step take 150 ms now and
    then, which costs nothing anyone would act on."""
    pause_excess: float = 0.10
    """A pause worth timing is an anomalous step at least 10% over the ideal: the goodput bound
    alone (median + 3 unscaled MAD, about 2 sigma) also passes 2% of normal steps."""
    periodic_min_count: int = 5
    """Periodic pauses: at least 5 pauses whose spacing is within 10% of the commonest one, making
    up at least half of all pauses."""
    period_tolerance: float = 0.1
    """Spacings within this share of the commonest one count as the same period."""
    periodic_share: float = 0.5
    """The periodic pauses must be at least this share of all anomalous steps."""
    min_period_steps: int = 2
    """Slow steps one after another are a slow stretch (a busy host, an eval), not a pause that
    recurs: a period is at least two steps."""
    drop_block_points: int = 100
    """A healthy run's 100-step medians of MFU or tokens/s jitter by a few percent; a 10% drop held
    for two blocks is a real slowdown."""
    drop_fraction: float = 0.10
    """A block median this share below the baseline is a drop."""
    baseline_blocks: int = 50
    """The run's own baseline: the median of the previous 50 block medians (5,000 steps)."""
    persist_blocks: int = 2
    """Consecutive dropped blocks that make a detection."""
    min_goodput: float = 0.90
    """Below 90% goodput a run loses more than one step in ten to stalls and pauses."""
    drop_metrics: tuple[str, ...] = (PERF_MFU, PERF_TOKENS_PER_S)
    """The throughput metrics judged for drops (higher is better)."""

    def __post_init__(self) -> None:
        self.drop_metrics = tuple(self.drop_metrics)

    def columns(self, run: RunData) -> list[str]:
        return [c for c in (PERF_STEP_TIME_S, *self.drop_metrics) if c in run.scalars.columns]

    def lookback(self, step_cadence: float) -> float:
        return max(2 * self.block_points, (self.baseline_blocks + self.persist_blocks + 1)
                   * self.drop_block_points) * step_cadence

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        out = []
        times = finite(run, PERF_STEP_TIME_S)
        times = times[times.to_numpy() > 0]  # a step cannot take no time: such values are not timings
        if len(times) >= 2:
            out.extend(self._step_times(run, times))
        for metric in self.drop_metrics:
            x = finite(run, metric)
            if len(x) >= 2:
                out.extend(self._drops(run, metric, x))
                if reference is not None:
                    out.extend(self._vs_reference(run, reference, metric, x))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        if not self.columns(run):
            return [NotJudged(self.name, f"the run logs none of {PERF_STEP_TIME_S}, "
                              f"{', '.join(self.drop_metrics)}")]
        times = finite(run, PERF_STEP_TIME_S)
        if 0 < len(times) < self.block_points:
            return [NotJudged(self.name, f"{len(times)} step times; goodput is judged over {self.block_points}",
                              "perf/goodput", f"{self.block_points - len(times)} more logged steps")]
        return []

    # --- step times --------------------------------------------------------------------------------
    def ideal_step_times(self, times: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Per step: (ideal step time, anomaly bound median + 3 MAD) of the block it is judged by."""
        steps = times.index.to_numpy()
        width = self.block_points * cadence(steps)
        ids = np.floor_divide(steps, width).astype(np.int64)
        uniq, start = np.unique(ids, return_index=True)
        counts = np.diff(np.append(start, ids.size))
        t = times.to_numpy()
        med = np.empty(uniq.size)
        bound = np.empty(uniq.size)
        ideal = np.empty(uniq.size)
        for i, (a, n) in enumerate(zip(start, counts)):
            block = t[a:a + n]
            med[i] = np.median(block)
            mad = np.median(np.abs(block - med[i]))
            bound[i] = med[i] + self.mad_factor * mad
            ideal[i] = block[block <= bound[i]].mean()
        # Judge each block by the previous complete one (or, for the first, by itself).
        full = counts >= self.block_points // 2
        judge = np.arange(uniq.size)
        prev_full = -1
        for i in range(uniq.size):
            if prev_full >= 0 and uniq[prev_full] == uniq[i] - 1:
                judge[i] = prev_full
            if full[i]:
                prev_full = i
        pos = np.repeat(np.arange(uniq.size), counts)
        return ideal[judge][pos], bound[judge][pos]

    def _step_times(self, run: RunData, times: pd.Series) -> list:
        steps = times.index.to_numpy()
        t = times.to_numpy()
        ideal, bound = self.ideal_step_times(times)
        anomalous = (t > bound) & (t >= (1 + self.pause_excess) * ideal)
        goodput = float(ideal.sum() / t.sum()) if t.sum() > 0 else float("nan")
        out = []
        periodic = self._periodic(steps, anomalous)
        if periodic is not None:
            sel = periodic
            lost = float((t[sel] - ideal[sel]).sum())
            period = float(np.median(np.diff(steps[sel])))
            evidence = {"rule": "periodic", "period_steps": period, "n": int(sel.sum()), "mean_excess_s": lost / sel.sum(),
                        "lost_s": lost, "lost_share": lost / float(t.sum()), "goodput": goodput}
            k = int(np.flatnonzero(sel)[np.argmax((t - ideal)[sel])])
            severity = Severity.WARNING if evidence["lost_share"] >= 1 - self.min_goodput else Severity.INFO
            message = (f"step time jumps every {period:.0f} steps ({int(sel.sum())} times, "
                       f"+{lost / sel.sum():.3g} s each, {evidence['lost_share']:.1%} of the time): a "
                       f"periodic pause such as garbage collection or a synchronous checkpoint")
            idx = np.flatnonzero(sel)
            out.append(self._detection(run, None, PERF_STEP_TIME_S, steps[idx[0]], steps[idx[-1]], steps[k],
                                       float(evidence["lost_share"]), severity, message, evidence))
            anomalous = anomalous & ~sel
        stall = anomalous & (t >= self.stall_ratio * ideal)
        for a, b in true_runs(stall):
            k = a + int(np.argmax(t[a:b + 1] / ideal[a:b + 1]))
            lost = float((t[a:b + 1] - ideal[a:b + 1]).sum())
            if lost < self.min_stall_s:
                continue
            evidence = {"rule": "stall", "step_time_s": float(t[k]), "ideal_s": float(ideal[k]), "ratio": float(t[k] / ideal[k]),
                        "bound_s": float(bound[k]), "lost_s": lost, "n": int(b - a + 1), "goodput": goodput}
            message = (f"stall: step took {t[k]:.3g} s, {t[k] / ideal[k]:.1f}x the ideal {ideal[k]:.3g} s "
                       f"({lost:.3g} s lost)")
            out.append(self._detection(run, None, PERF_STEP_TIME_S, steps[a], steps[b], steps[k],
                                       float(t[k] / ideal[k]), Severity.WARNING, message, evidence))
        # Goodput is a verdict on a run, not on a handful of steps: one block at least.
        if np.isfinite(goodput) and goodput < self.min_goodput and t.size >= self.block_points:
            evidence = {"goodput": goodput, "ideal_time_s": float(ideal.sum()), "actual_time_s": float(t.sum()),
                        "band": self.min_goodput, "n": int(t.size)}
            message = (f"goodput {goodput:.1%}: {t.sum() - ideal.sum():.4g} s of {t.sum():.4g} s went to "
                       f"steps slower than the ideal")
            k = int(np.argmax(t - ideal))
            out.append(self._detection(run, None, "perf/goodput", steps[0], steps[-1], steps[k],
                                       1.0 - goodput, Severity.WARNING, message, evidence))
        return out

    def _periodic(self, steps: np.ndarray, anomalous: np.ndarray) -> np.ndarray | None:
        """Mask of the anomalies that recur at the commonest spacing, if they dominate."""
        idx = np.flatnonzero(anomalous)
        if idx.size < self.periodic_min_count:
            return None
        gaps = np.diff(steps[idx])
        values, counts = np.unique(gaps, return_counts=True)
        period = float(values[np.argmax(counts)])
        if period < self.min_period_steps:
            return None
        near = np.abs(gaps - period) <= self.period_tolerance * period
        on = np.zeros(idx.size, dtype=bool)
        on[1:] |= near
        on[:-1] |= near
        if on.sum() < self.periodic_min_count or on.sum() < self.periodic_share * idx.size:
            return None
        mask = np.zeros(anomalous.size, dtype=bool)
        mask[idx[on]] = True
        return mask

    # --- MFU / tokens per second ------------------------------------------------------------------
    def _drops(self, run: RunData, metric: str, x: pd.Series) -> list:
        steps = x.index.to_numpy()
        w = window_summaries(steps, x.to_numpy(), self.drop_block_points * cadence(steps), medians_only=True)
        med = pd.Series(w.median)
        base = med.rolling(self.baseline_blocks, min_periods=min(5, self.baseline_blocks)).median().shift(1).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = w.median / base - 1.0
        flag = rel < -self.drop_fraction
        out = []
        for a, b in signed_runs(flag, rel, w.ids, self.persist_blocks):
            k = a + int(np.argmin(rel[a:b + 1]))
            evidence = {"rule": "drop", "value": float(w.median[k]), "baseline": float(base[a]), "delta": float(rel[k]),
                        "band": -self.drop_fraction, "blocks": int(b - a + 1), "n": int(w.n[a:b + 1].sum())}
            message = (f"{metric} {w.median[k]:.4g}, {-rel[k]:.0%} below the run's own baseline "
                       f"{base[a]:.4g}")
            out.append(self._detection(run, None, metric, w.first_step[a], w.last_step[b], w.mid_step[k],
                                       float(-rel[k]), Severity.WARNING, message, evidence))
        return out

    def _vs_reference(self, run: RunData, reference: RunData, metric: str, x: pd.Series) -> list:
        y = finite(reference, metric)
        if len(y) < 2:
            return []
        width = self.drop_block_points * cadence(x.index.to_numpy())
        w = window_summaries(x.index.to_numpy(), x.to_numpy(), width, medians_only=True)
        v = window_summaries(y.index.to_numpy(), y.to_numpy(), width, medians_only=True)
        common, iw, iv = np.intersect1d(w.ids, v.ids, return_indices=True)
        if common.size == 0:
            return []
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = w.median[iw] / v.median[iv] - 1.0
        flag = rel < -self.drop_fraction
        out = []
        for a, b in signed_runs(flag, rel, common, self.persist_blocks):
            k = a + int(np.argmin(rel[a:b + 1]))
            evidence = {"value": float(w.median[iw][k]), "reference_value": float(v.median[iv][k]),
                        "delta": float(rel[k]), "band": -self.drop_fraction, "blocks": int(b - a + 1)}
            message = (f"{metric} {w.median[iw][k]:.4g}, {-rel[k]:.0%} below the reference's "
                       f"{v.median[iv][k]:.4g} (same hardware? then the run is slower)")
            out.append(self._detection(run, reference, f"{metric}/vs_reference", w.first_step[iw][a], w.last_step[iw][b],
                                       w.mid_step[iw][k], float(-rel[k]), Severity.INFO, message, evidence))
        return out

