"""Loss and grad-norm spikes: OLMo-core's rule, the OLMo 2 paper's rule, and a robust one.

Three definitions of "this step is a spike" (all look only at earlier steps):

* `olmo_core`: value > mean + 6 sigma of the previous 128 values (sigma with ddof 0, and no
  spike while that sigma is below 1e-10), as in OLMo-core's StabilityMonitorCallback.
* `olmo2`: |value - mean| >= 7 sigma of the previous 1,000 values, the OLMo 2 paper's
  definition behind its spike score.
* `gapwatch` (the default): value - expected > 6 sigma. Expected is the median of the previous
  32 values plus the typical lag of that median behind the series; sigma is the robust spread
  (scaled MAD) of the deviations from it. Lag and spread are measured on the previous complete
  block of 128 logged values (and sigma is at least the median spread of the previous four
  blocks, since a MAD of 128 values is itself uncertain by ~12%). A trend does not inflate this
  sigma (the loss falling 0.5 nats in 128 early steps makes OLMo-core's several times the real
  noise), and neither does an earlier spike (one spike cannot mask the next). Grad norm is
  judged on a log scale, since it spikes multiplicatively; floors on sigma keep quantised logs
  (llm.c prints the grad norm to two decimals) from turning every tick into a spike.

The spike score (the OLMo-core / OLMo 2 statistic) is the share of the last `score_window`
logged steps with a spike; `score_series` returns it as the `detect/spike_score/*` series, from
the rule's first verdict on (`first_verdict_points`: before it nothing was judged, not calm).
Each spike becomes a detection covering its excursion until the value is back within
`recover_sigma` of the level before it: INFO when it recovers within `recovery_points`, WARNING
when it takes longer, CRITICAL when it has not recovered after `unrecovered_points`.

Incremental mode (`judge_tail`) keeps ~1,200 recent values per metric and, for the spike score,
the positions of the spikes among the last `score_window` values, so an update costs the same at
step 10,000 and at step 1,000,000.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from monitor.schema import (
    SPIKE_SCORE_GRAD_NORM,
    SPIKE_SCORE_LOSS,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    Drawing,
    NotJudged,
    RunData,
    Section,
    Severity,
    Story,
)

from .base import Detector, Reads, ReferenceUse, StoryRole
from .incremental import DetectorState, Incremental
from .rundata import finite
from .stats import MAD_TO_SIGMA, row_medians, trailing_median, true_runs

DEFINITIONS = ("gapwatch", "olmo_core", "olmo2")
SCORE_KEYS = {TRAIN_LOSS: SPIKE_SCORE_LOSS, TRAIN_GRAD_NORM: SPIKE_SCORE_GRAD_NORM}


def olmo_core_flags(x: pd.Series, window: int = 128, threshold: float = 6.0) -> np.ndarray:
    """OLMo-core StabilityMonitorCallback: value > mean + threshold * std of the previous
    `window` values (population std; only with a full window; never while std < 1e-10)."""
    mean = x.rolling(window).mean().shift(1).to_numpy()
    std = x.rolling(window).std(ddof=0).shift(1).to_numpy()
    with np.errstate(invalid="ignore"):
        return (x.to_numpy() > mean + threshold * std) & (std >= 1e-10)


def olmo2_flags(x: pd.Series, window: int = 1000, threshold: float = 7.0) -> np.ndarray:
    """OLMo 2 paper: at least `threshold` standard deviations from the rolling average of the
    previous `window` values."""
    mean = x.rolling(window).mean().shift(1).to_numpy()
    std = x.rolling(window).std(ddof=0).shift(1).to_numpy()
    with np.errstate(invalid="ignore"):
        return (np.abs(x.to_numpy() - mean) >= threshold * std) & (std > 0)


@dataclass
class SpikeDetector(Detector, Incremental):
    name: ClassVar[str] = "spike"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.INSTABILITY
    explanation: ClassVar[str] = "loss spikes"
    judges: ClassVar[str] = "spikes"
    shown_in: ClassVar[tuple[Section, ...]] = (Section.GRAD_NORM,)
    draws: ClassVar[tuple[Drawing, ...]] = (Drawing.SPIKE_SCORES,)
    score_keys: ClassVar[dict[str, str]] = SCORE_KEYS
    caveat: ClassVar[bool] = True
    reads_events: ClassVar[bool] = False
    reads: ClassVar[Reads] = Reads(fields=("metrics",))
    counts_from_zero: ClassVar[tuple[str, ...]] = ("recovery_points", "unrecovered_points")

    metrics: tuple[str, ...] = (TRAIN_LOSS, TRAIN_GRAD_NORM)
    """The metrics judged for spikes."""
    definition: str = "gapwatch"
    """Which rule makes the detections: gapwatch, olmo_core or olmo2 (all three are evidence)."""
    threshold: float = 6.0
    """OLMo-core's threshold, kept for ours: with a sigma that trend and earlier spikes do not
    inflate, 6 sigma finds more real spikes at the same nominal false-alarm rate."""
    center_window: int = 32
    """Level = median of the previous 32 values: short enough to follow the early-training fall,
    long enough that a spike cannot move it."""
    scale_window: int = 128
    """Lag and noise from blocks of 128 values: OLMo-core's window length."""
    slow_blocks: int = 4
    """Sigma is at least the median spread of this many previous blocks (512 values)."""
    log_scale: tuple[str, ...] = (TRAIN_GRAD_NORM,)
    """Metrics judged on a log scale: grad norm spikes multiplicatively."""
    min_relative_sigma: float = 0.01
    """Noise floor as a share of the level: a loss excursion under 6% is not called a spike."""
    min_log_sigma: float = 0.05
    """Noise floor on the log scale: llm.c's grad norm, printed to two decimals around 0.22,
    wobbles to 0.27 (1.2x) all through its last thousand steps; with 0.05 the smallest spike is
    1.35x its level."""
    olmo_core_window: int = 128
    """OLMo-core StabilityMonitorCallback's window of previous values."""
    olmo_core_threshold: float = 6.0
    """OLMo-core StabilityMonitorCallback's threshold in sigma."""
    olmo2_window: int = 1000
    """OLMo 2 paper (spike score): 7 sigma from the rolling average of the last 1,000 steps."""
    olmo2_threshold: float = 7.0
    """OLMo 2 paper's threshold in sigma."""
    score_window: int = 10_000
    """OLMo-core's rolling_window for the running spike score."""
    recover_sigma: float = 3.0
    """An excursion ends when the value is back within this many sigma of the level before it."""
    recovery_points: int = 20
    """A spike back within this many logged steps is INFO; a longer excursion is a WARNING."""
    unrecovered_points: int = 200
    """A spike not recovered after this many logged steps is CRITICAL."""

    def __post_init__(self) -> None:
        if self.definition not in DEFINITIONS:
            raise ValueError(f"spike definition must be one of {DEFINITIONS}, not {self.definition!r}")

    def rule_history(self) -> int:
        """Values before a point that its verdict depends on, under every rule."""
        ours = self.center_window + (self.slow_blocks + 1) * self.scale_window
        return max(ours, self.olmo_core_window, self.olmo2_window) + 1

    def first_verdict_points(self) -> int:
        """Logged values before the first one the chosen rule can judge."""
        if self.definition == "olmo_core":
            return self.olmo_core_window
        if self.definition == "olmo2":
            return self.olmo2_window
        return self.center_window + self.scale_window

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        out = []
        need = self.first_verdict_points() + 1
        for metric in self.columns(run):
            n = len(finite(run, metric))
            if n < need:
                out.append(NotJudged(self.name, f"only {n} logged value{'' if n == 1 else 's'}; a spike is judged "
                                     f"against the {self.first_verdict_points()} before it", metric,
                                     f"{need - n} more logged step{'' if need - n == 1 else 's'}"))
        return out

    def history_points(self, column: str) -> int:
        # Every rule's history; an excursion still up is carried in the state (judge_tail).
        return self.rule_history()

    def merge_gap(self, step_cadence: float) -> float:
        return 0.0  # two spikes are two detections, however close

    def role(self, detection) -> StoryRole:
        """Spikes are named for the metric that spiked: a grad-norm spike is not a loss spike."""
        base = super().role(detection)
        return base if detection.metric == TRAIN_LOSS else replace(base, explanation=f"{detection.metric} spikes")

    # --- the three rules -----------------------------------------------------------------------
    def gapwatch_z(self, x: pd.Series, log: bool, first: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(z, expected value, sigma) of each value against earlier values, on the judged scale
        (log for grad norm). `first` is the position of x[0] in the whole series: blocks are
        counted from the start of the run, so a run judged in pieces meets the same blocks."""
        y = np.log(np.clip(x, 1e-30, None)) if log else x
        level = np.r_[np.nan, trailing_median(y.to_numpy(), self.center_window)[:-1]]
        dev = y.to_numpy() - level
        size = self.scale_window
        block = (np.arange(dev.size) + first) // size
        lag, spread = _block_stats(dev, block, first, size)
        # Trades exactness for speed: lag and spread come from the previous complete block (one
        # per 128 values), not a window sliding with every step; each stays fully causal.
        prev = block - block[0] - 1
        ok = prev >= 0
        lag_at = np.full(dev.size, np.nan)
        sig_at = np.full(dev.size, np.nan)
        lag_at[ok] = lag[prev[ok]]
        slow = pd.Series(spread).rolling(self.slow_blocks, min_periods=1).median().to_numpy()
        sig_at[ok] = MAD_TO_SIGMA * np.fmax(spread[prev[ok]], slow[prev[ok]])
        expected = level + lag_at
        floor = self.min_log_sigma if log else self.min_relative_sigma * np.abs(expected)
        # np.maximum keeps NaN: no verdict until the windows hold enough history.
        sigma = np.maximum(sig_at, floor)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = (y.to_numpy() - expected) / sigma
        return z, expected, sigma

    def flags(self, x: pd.Series, metric: str, first: int = 0, z: np.ndarray | None = None) -> dict[str, np.ndarray]:
        if z is None:
            z = self.gapwatch_z(x, metric in self.log_scale, first)[0]
        with np.errstate(invalid="ignore"):
            ours = z > self.threshold
        return {
            "gapwatch": ours,
            "olmo_core": olmo_core_flags(x, self.olmo_core_window, self.olmo_core_threshold),
            "olmo2": olmo2_flags(x, self.olmo2_window, self.olmo2_threshold),
        }

    def spike_scores(self, flags: np.ndarray) -> np.ndarray:
        """Share of the last `score_window` logged steps that were spikes (over fewer steps
        until that many have been logged, unlike OLMo-core, which waits for a full window)."""
        return pd.Series(flags.astype(float)).rolling(self.score_window, min_periods=1).mean().to_numpy()

    def _judged(self, run: RunData):
        """Per metric with two or more finite values: (metric, values, z, expected, sigma, flags)."""
        for metric in self.columns(run):
            x = finite(run, metric)
            if len(x) < 2:
                continue
            z, expected, sigma = self.gapwatch_z(x, metric in self.log_scale)
            yield metric, x, z, expected, sigma, self.flags(x, metric, z=z)

    def score_series(self, run: RunData) -> pd.DataFrame:
        """Long frame (step, key, value) of the spike score of each metric, by `definition`."""
        return self.detect_with_scores(run)[1]

    # --- batch ---------------------------------------------------------------------------------
    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        return self.detect_with_scores(run)[0]

    def detect_with_series(self, run: RunData, reference: RunData | None = None) -> tuple[list, pd.DataFrame]:
        return self.detect_with_scores(run, compact=True)

    def detect_with_scores(self, run: RunData, compact: bool = False) -> tuple[list, pd.DataFrame]:
        """The detections and the spike-score series from one pass over the run; `compact`
        keeps only the points where a score changes (see `change_points`)."""
        out, frames = [], []
        for metric, x, z, expected, sigma, every in self._judged(run):
            scores = {k: self.spike_scores(v) for k, v in every.items()}
            out.extend(self._excursions(run, metric, x, z, expected, sigma, every, scores)[0])
            if metric in SCORE_KEYS:
                # No score before the rule's first verdict: a share of 0 there would read as calm.
                judged = self.first_verdict_points()
                steps, values = x.index.to_numpy()[judged:], scores[self.definition][judged:]
                if compact:
                    keep = change_points(values)
                    steps, values = steps[keep], values[keep]
                frames.append(pd.DataFrame({"step": steps, "key": SCORE_KEYS[metric], "value": values}))
        series = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            {"step": pd.Series(dtype="int64"), "key": pd.Series(dtype=str), "value": pd.Series(dtype=float)})
        return sorted(out, key=lambda d: (d.start_step, d.metric)), series

    # --- incremental ---------------------------------------------------------------------------
    def judge_tail(self, state: DetectorState, combined: RunData, fresh: RunData,
                   ref: RunData | None) -> tuple[list, RunData]:
        """Judges the new values with ~1,200 earlier ones; the spike score comes from the
        positions of earlier spikes kept in the state (`extra["spikes"]`), and blocks are counted
        from the run's first value, so the tail meets the blocks a whole-run pass does."""
        last_seen = state.last_step if state.last_step is not None else -np.inf
        memory = state.extra.setdefault("spikes", {})
        found, series = [], []
        for metric in self.columns(combined):
            x = finite(combined, metric)
            if x.empty:
                continue
            mem = memory.setdefault(metric, {"n": 0, "flags": {k: [] for k in DEFINITIONS}})
            steps = x.index.to_numpy()
            old = int(np.searchsorted(steps, last_seen, side="right"))
            first = mem["n"] - old  # position of x[0] in the whole run
            z, expected, sigma = self.gapwatch_z(x, metric in self.log_scale, max(first, 0))
            every = self.flags(x, metric, z=z)
            scores = {}
            for name, flags in every.items():
                earlier = np.asarray(mem["flags"][name], dtype=np.int64)
                fresh_pos = first + old + np.flatnonzero(flags[old:])
                merged = np.concatenate([earlier, fresh_pos])
                scores[name] = _scores_at(merged, first + np.arange(x.size), self.score_window)
                keep_from = first + x.size - self.score_window
                mem["flags"][name] = merged[merged > keep_from].tolist()
            mem["n"] = first + x.size
            # An excursion still up at the last value judged is followed on from there (its start
            # may have left the tail); flags within the excursions already judged are theirs.
            excursions, mem["up"] = self._excursions(combined, metric, x, z, expected, sigma, every, scores,
                                                     up=mem.get("up"), through=mem.get("through"))
            if excursions:
                mem["through"] = max(int(d.end_step) for d in excursions)
            found += excursions
            judged = self.first_verdict_points() - first  # position in x of the first scored value
            if metric in SCORE_KEYS and max(old, judged) < x.size:
                # The new values' scores, from the last value already written (or the first one
                # scored): the points where the score changes, as the whole-run pass stores them
                # (change_points).
                lo = max(old - 1, judged, 0)
                values = scores[self.definition][lo:]
                keep = change_points(values)
                series.append(pd.DataFrame({"step": steps[lo:][keep], "key": SCORE_KEYS[metric],
                                            "value": values[keep]}))
        if np.isfinite(last_seen):
            # An excursion that ended before the last value judged was settled then, with all its
            # history: found again it is judged with less (its score drifts), or it is an artifact
            # of that. Only one still up at the last value (reported then) can grow.
            found = [d for d in found if d.end_step > last_seen
                     or (d.end_step == last_seen and f"{d.metric}@{d.start_step}" in state.reported)]
        state.series = pd.concat(series, ignore_index=True) if series else None
        return found, combined

    # --- excursions become detections ------------------------------------------------------------
    def _excursions(self, run, metric, x, z, expected, sigma, every, scores, up: dict | None = None,
                    through: int | None = None) -> tuple[list, dict | None]:
        """Each spike's excursion as a detection: from the flagged value until the value is back
        within `recover_sigma` of the level before it, however long that takes (a loss that jumped
        and stays up is one excursion that goes on). Returns the detections and the excursion
        still up at the last value (None if none), which a later piece continues through `up`;
        `through`: the last step earlier pieces' excursions covered (flags up to it are theirs)."""
        log = metric in self.log_scale
        y = np.log(np.clip(x.to_numpy(), 1e-30, None)) if log else x.to_numpy()
        steps = x.index.to_numpy()
        out, still_up = [], None
        i_next = 0 if through is None else int(np.searchsorted(steps, through, side="right"))
        if up is not None and i_next < len(y):
            back = self._back(y, i_next, up["base"], up["sigma"])
            end, recovered, peak = back - 1, back < len(y), up["peak"]
            if end >= i_next:
                k = i_next + int(np.argmax(y[i_next:end + 1]))
                if y[k] > peak["y"]:
                    peak = self._peak(x, y, k, every, scores, up["base"], up["sigma"])
            excursion = {**up, "values": up["values"] + end - i_next + 1, "peak": peak,
                         "through": int(steps[end]) if end >= i_next else up["through"]}
            out.append(self._excursion_detection(run, metric, log, excursion, recovered))
            still_up = None if recovered else excursion
            i_next = end + 1
        elif up is not None:
            still_up = up  # nothing new of this metric
        for a, _ in true_runs(every[self.definition]):
            if a < i_next:
                continue  # inside the excursion of an earlier spike
            base, sig = expected[a], sigma[a]
            if not np.isfinite(base) or not np.isfinite(sig):
                base, sig = _fallback_level(y, a)
            base, sig = float(base), float(sig)
            back = self._back(y, a, base, sig)
            end, recovered = max(back - 1, a), back < len(y)
            k = a + int(np.argmax(y[a:end + 1]))
            excursion = {"start": int(steps[a]), "base": base, "sigma": sig, "values": end - a + 1,
                         "peak": self._peak(x, y, k, every, scores, base, sig), "through": int(steps[end])}
            out.append(self._excursion_detection(run, metric, log, excursion, recovered))
            still_up = None if recovered else excursion
            i_next = end + 1
        return out, still_up

    def _back(self, y: np.ndarray, a: int, base: float, sig: float) -> int:
        """Position of the first value from `a` on that is back within `recover_sigma` of `base`
        (len(y) when none is yet). Read in growing blocks: most excursions end within a few values."""
        limit, i, size = base + self.recover_sigma * sig, a, 64
        while i < len(y):
            back = np.flatnonzero(y[i:i + size] <= limit)
            if back.size:
                return i + int(back[0])
            i, size = i + size, size * 4
        return len(y)

    def _peak(self, x, y, k: int, every, scores, base: float, sig: float) -> dict:
        """The excursion's highest value and what each rule said there; its size in sigma is
        against the level before the spike, as its message gives it."""
        return {"step": int(x.index[k]), "value": float(x.iloc[k]), "y": float(y[k]), "z": float((y[k] - base) / sig),
                "olmo_core_flag": bool(every["olmo_core"][k]), "olmo2_flag": bool(every["olmo2"][k]),
                "spike_score": float(scores[self.definition][k]),
                "spike_score_olmo_core": float(scores["olmo_core"][k]),
                "spike_score_olmo2": float(scores["olmo2"][k])}

    def _excursion_detection(self, run, metric: str, log: bool, excursion: dict, recovered: bool):
        # Severity only grows as later values arrive (live and whole-run judgements agree): a spike
        # still up is INFO until it has been up for recovery_points values, CRITICAL once up for
        # unrecovered_points, and stays so when it comes back after that.
        n, peak, base = excursion["values"], excursion["peak"], excursion["base"]
        if n > self.unrecovered_points:
            severity = Severity.CRITICAL
        else:
            severity = Severity.WARNING if n > self.recovery_points else Severity.INFO
        how = (f"recovered after {n:,} step{'s' if n > 1 else ''}" if recovered
               else f"not recovered after {n:,} steps" if n > self.unrecovered_points else "not recovered yet")
        value = peak["value"]
        baseline = float(np.exp(base)) if log else base
        ratio = value / baseline if baseline else float("inf")
        evidence = {
            "value": value, "baseline": baseline, "ratio": ratio, "z": peak["z"], "sigma": excursion["sigma"],
            "scale": "log" if log else "linear", "excursion_steps": int(n), "recovered": bool(recovered),
            "definition": self.definition, **{k: v for k, v in peak.items() if k not in ("step", "value", "y", "z")},
        }
        size = f"{ratio:.1f}x its level" if log else f"+{value - baseline:.3f} over its level {baseline:.3f}"
        message = f"{metric} spike to {value:.4g} ({size}, {peak['z']:.1f} sigma), {how}"
        return self._detection(run, None, metric, excursion["start"], excursion["through"], peak["step"], peak["z"],
                               severity, message, evidence, known=excursion["start"])


def change_points(values: np.ndarray) -> np.ndarray:
    """Indices that keep the shape of a step-wise series (a rolling share changes only when a
    spike enters or leaves its window): the ends, and each change with the value just before
    it. Drawn with straight lines it is the same curve, in a few rows instead of one per step."""
    if values.size == 0:
        return np.array([], dtype=np.int64)
    change = np.flatnonzero(np.diff(values) != 0) + 1
    return np.unique(np.concatenate(([0, values.size - 1], change, change - 1)))


def _block_stats(dev: np.ndarray, block: np.ndarray, first: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Median and MAD of `dev` in each block of `size` values (NaN for blocks not yet complete
    or with too few defined values)."""
    n_blocks = int(block[-1] - block[0] + 1)
    head = first % size  # values of the first block that lie before this piece
    grid = np.full(n_blocks * size, np.nan)
    grid[head:head + dev.size] = dev
    grid = grid.reshape(n_blocks, size)
    complete = np.ones(n_blocks, dtype=bool)
    complete[-1] = (head + dev.size) % size == 0
    if head:
        complete[0] = False  # values before the piece are not here
    enough = np.sum(np.isfinite(grid), axis=1) >= size // 2
    with np.errstate(invalid="ignore"):
        lag = np.where(complete & enough, row_medians(grid), np.nan)
        spread = np.where(complete & enough, row_medians(np.abs(grid - lag[:, None])), np.nan)
    return lag, spread


def _scores_at(flag_positions: np.ndarray, positions: np.ndarray, window: int) -> np.ndarray:
    """Share of spikes among the `window` values ending at each position (fewer at the start)."""
    flag_positions = np.sort(flag_positions)
    hi = np.searchsorted(flag_positions, positions, side="right")
    lo = np.searchsorted(flag_positions, positions - window, side="right")
    return (hi - lo) / np.minimum(window, positions + 1)


def _fallback_level(y: np.ndarray, a: int) -> tuple[float, float]:
    """Level and scale for a spike flagged by another rule before our windows are full."""
    prev = y[max(0, a - 32):a]
    if prev.size == 0:
        return float(y[a]), 1.0
    sig = MAD_TO_SIGMA * float(np.median(np.abs(prev - np.median(prev))))
    return float(np.median(prev)), max(sig, 1e-12)
