"""Reference divergence: the run's train loss leaves its reference's, persistently and by more
than two runs of one recipe differ.

On the aligned axis, d = run - reference is cut into windows of `window_steps` steps, or of
`min_window_points` logged values where the metric is logged so seldom that fewer would fall in
that many steps (aligned on the step axis, so a run judged whole or in pieces meets the same
windows; the logging interval that sets their width is read from the first `cadence_points` logged
steps). A trainer that logs every step fills a window with `window_steps` values; one that logs the
mean loss every 500 steps (Hugging Face's default) or an estimate at each evaluation (nanoGPT) has
each value average many steps already, and its windows hold fewer, longer-averaged values. Each
complete window's median of d (a median, so spikes either run has, shared or not, cannot move it)
gets a z against two kinds of noise:

* the window's own standard error, from the robust spread (scaled MAD) of d inside it and its
  lag-1 autocorrelation (successive losses are correlated, so n points are worth fewer);
* the between-run term tau of monitor/detectors/noise.py: two seeds of one recipe sit a persistent
  offset apart (0.2% of the loss on the 13 repeats) and reach a loss a few percent of steps apart
  while it falls fast. Without it, three quarters of the 13 repeats' windows have |z| > 3.

A window counts when |z| > `z_threshold`; a detection is `persist_windows` consecutive counting
windows of one sign. The direction is reported: below the reference is what repeated data looks
like when held-out loss did not follow (which the memorization detector tests), above is slower learning.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import stats as sps
from sklearn.isotonic import isotonic_regression

from monitor.schema import (
    HELDOUT_PREFIX,
    TRAIN_LOSS,
    Clean,
    CleanRule,
    Drawing,
    NotJudged,
    RunData,
    Section,
    Story,
    VerdictRole,
)

from .base import CLEAN_Z, Detector, Reads, ReferenceUse, StoryRole, severity_for
from .incremental import Incremental
from .checkpoints import heldout_pairs, over_sets
from .noise import TRAIN_NOISE, BetweenRunNoise, log_slope
from .overlap import overlap
from .rundata import finite, logging_interval
from .stats import mad_sigma, signed_runs, window_summaries

WINDOW_COLUMNS = ("window", "first_step", "last_step", "mid_step", "n", "delta", "stderr", "level", "slope",
                  "tau", "z", "complete")


@dataclass
class ReferenceDivergence(Detector, Incremental):
    name: ClassVar[str] = "reference_divergence"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.REQUIRED
    story: ClassVar[Story] = Story.DIVERGENCE
    explanation: ClassVar[str] = "train loss diverged from the reference"
    judges: ClassVar[str] = "train loss against the reference"
    clean_rule: ClassVar[CleanRule] = CleanRule.CLEAN_VERDICTS
    shown_in: ClassVar[tuple[Section, ...]] = (Section.TRAIN,)
    draws: ClassVar[tuple[Drawing, ...]] = (Drawing.DELTA_BAND,)
    verdict: ClassVar[VerdictRole] = VerdictRole(50, "diverged_{direction}", "Diverged {direction} the reference")
    reads: ClassVar[Reads] = Reads(prefixes=(HELDOUT_PREFIX,), fields=("metric",))

    metric: str = TRAIN_LOSS
    """The metric compared with the reference."""
    window_steps: int = 100
    """Steps per window: a run that logs every step has 100 values in each, enough for a median
    that one spike cannot move."""
    min_window_points: int = 8
    """Logged values a window holds at least, where the metric is logged so seldom that fewer
    would fall in `window_steps` (each such value is then usually a mean over its interval). A
    window's standard error comes from its own spread, whose median absolute deviation is uncertain
    by about 1.17/sqrt(n) of itself for normal noise: 41% at eight values. Not a false-alarm fit: on
    the calibration half no clean pair fired at any floor from 2 to 16 with train loss logged every
    10 or 25 steps as a mean (`python -m bench.quality.calibrate` prints it)."""
    cadence_points: int = 32
    """The logging interval, which sets the window width in steps, is the median spacing of the
    metric's first 32 logged steps: fixed once known, so live and whole-run judgements agree."""
    noise_level: float = TRAIN_NOISE.level
    """Between-run spread as a share of the loss: fitted on the calibration half (noise.py)."""
    noise_timing: float = TRAIN_NOISE.timing
    """Between-run step shift as a fraction of ln(step): fitted on the calibration half (noise.py)."""
    z_threshold: float = 3.0
    """Three standard deviations of the between-run noise: a 0.27% two-sided chance per window for
    two runs of one recipe."""
    persist_windows: int = 3
    """Consecutive counting windows of one sign that make a detection: 300 steps of a run that logs
    every step."""
    min_window_fill: float = 0.5
    """A window needs at least half the values its width holds to be judged (a gap in the log
    leaves fewer)."""
    critical_ratio: float = 3.0
    """An effect three times the threshold it had to clear is CRITICAL."""
    evidence_points: int = 20_000
    """Points of the interval used for the per-run noise evidence (isotonic fits); bounded so that
    evidence for a million-step interval costs milliseconds."""

    @property
    def noise(self) -> BetweenRunNoise:
        return BetweenRunNoise(self.noise_level, self.noise_timing)

    def history_points(self, column: str) -> int:
        # The windows a run of counting windows may reach back over, and the one still growing;
        # held-out checkpoints only name what held-out loss did in the message.
        if column == self.metric:
            return (self.persist_windows + 2) * max(self.window_steps, self.min_window_points)
        return 4 * self.persist_windows

    def settled_before(self, run: RunData, first_new: float) -> float:
        return first_new - (self.width(run) or 0.0)

    # --- the windows ---------------------------------------------------------------------------
    def width(self, run: RunData) -> float | None:
        """Window width in steps, for the logging interval of the metric's first `cadence_points`
        logged steps (None until that many are logged)."""
        interval = logging_interval(run, self.metric, self.cadence_points)
        return None if interval is None else self.window_width(interval)

    def window_width(self, interval: float) -> float:
        """Steps per window for a metric logged every `interval` steps: `window_steps`, or
        `min_window_points` intervals where that holds fewer values."""
        return max(float(self.window_steps), self.min_window_points * float(interval))

    def windows(self, run: RunData, reference: RunData) -> pd.DataFrame:
        """One row per window with steps of both runs: the median of d, its standard error, the
        reference's level and log-step slope there, the between-run tau, z, and whether the window
        is complete (its last step has been logged, and it holds `min_window_fill` of its points)."""
        interval = logging_interval(run, self.metric, self.cadence_points)
        width = None if interval is None else self.window_width(interval)
        r, f = finite(run, self.metric), finite(reference, self.metric)
        common = r.index.intersection(f.index)
        if width is None or common.empty:
            return pd.DataFrame({c: pd.Series(dtype=float) for c in WINDOW_COLUMNS})
        steps = common.to_numpy()
        w = window_summaries(steps, r.loc[common].to_numpy() - f.loc[common].to_numpy(), width)
        ref_w = window_summaries(f.index.to_numpy(), f.to_numpy(), width, medians_only=True)
        level = pd.Series(ref_w.median, index=ref_w.ids).reindex(w.ids).to_numpy()
        slope = log_slope(ref_w.mid_step, ref_w.median, w.mid_step)
        tau = self.noise.tau(level, slope)
        se = w.median_se
        z = self.noise.z(w.median, se, level, slope)
        last_logged = float(r.index[-1])
        complete = (((w.ids + 1) * width - interval <= last_logged)
                    & (w.n >= self.min_window_fill * width / interval))
        return pd.DataFrame({"window": w.ids, "first_step": w.first_step, "last_step": w.last_step,
                             "mid_step": w.mid_step, "n": w.n, "delta": w.median, "stderr": se, "level": level,
                             "slope": slope, "tau": tau, "z": z, "complete": complete,
                             "sigma_step": w.sigma, "autocorrelation": w.rho})

    def band(self, stderr: np.ndarray, level: np.ndarray, slope: np.ndarray) -> np.ndarray:
        """What a window median of d must exceed: z_threshold x sqrt(stderr^2 + tau^2)."""
        return self.z_threshold * np.hypot(np.asarray(stderr, dtype=float), self.noise.tau(level, slope))

    # --- judging -------------------------------------------------------------------------------
    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        if reference is None:
            return []
        w = self.windows(run, reference)
        w = w[w["complete"].astype(bool)].reset_index(drop=True)
        if len(w) < self.persist_windows:
            return []
        z = w["z"].to_numpy(dtype=float)
        with np.errstate(invalid="ignore"):
            flag = np.abs(z) > self.z_threshold
        out = []
        for a, b in signed_runs(flag, z, w["window"].to_numpy(), self.persist_windows):
            out.append(self._one(run, reference, w, a, b))
        return out

    def role(self, detection) -> StoryRole:
        """Train loss below the reference is what repeated data looks like (memorization's story,
        which names it when held-out loss is shown tied), unless held-out loss moved as well: then
        it is a divergence (an improvement). Above the reference, the run diverges."""
        base = super().role(detection)
        if detection.evidence.get("direction") == "below":
            return StoryRole(Story.MEMORIZATION.value, base.specificity, "train loss below the reference",
                             base.clean_rule, yields_to=Story.DIVERGENCE.value)
        return replace(base, explanation="train loss above the reference")

    def clean(self, run: RunData, reference: RunData | None = None) -> list[Clean]:
        """Complete windows whose median difference, with its 90% interval, lies inside the band a
        detection must clear: the two runs are tied there."""
        if reference is None:
            return []
        w = self.windows(run, reference)
        w = w[w["complete"].astype(bool)]
        if w.empty:
            return []
        delta, se = w["delta"].to_numpy(dtype=float), w["stderr"].to_numpy(dtype=float)
        band = self.band(se, w["level"], w["slope"])
        with np.errstate(invalid="ignore"):
            tied = np.abs(delta) + CLEAN_Z * se <= band
        return [self._clean(run, self.metric, first, last, {"delta": float(d), "stderr": float(e), "band": float(b)},
                            alike_to=reference)
                for first, last, d, e, b, ok in zip(w["first_step"], w["last_step"], delta, se, band, tied) if ok]

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        if reference is None:
            return []
        r = finite(run, self.metric)
        shared = overlap(run, reference, self.metric)
        if shared is None:
            who = "the run" if r.empty else "the reference"
            return [NotJudged(self.name, f"{who} logs no {self.metric}", self.metric)]
        if finite(reference, self.metric).empty:
            # Aligned, a metric logged at no common step leaves the reference's frame.
            return [NotJudged(self.name, shared.no_common_step(), self.metric)]
        width = self.width(run)
        if width is None:
            return [NotJudged(self.name, f"only {len(r)} logged steps, too few to know the logging interval",
                              self.metric, f"{self.cadence_points - len(r)} more logged steps")]
        w = self.windows(run, reference)
        complete = int(w["complete"].sum()) if len(w) else 0
        if len(w) == 0:
            return [NotJudged(self.name, shared.no_common_step(), self.metric)]
        if complete < self.persist_windows:
            missing = (self.persist_windows - complete) * width
            return [NotJudged(self.name, f"{complete} complete window(s) of {width:.0f} steps; a verdict needs "
                              f"{self.persist_windows}", self.metric, f"about {missing:.0f} more steps")]
        # Steps of the run the reference never reached are judged by no window: said when they
        # span a window at least (a shorter stretch would be an incomplete window anyway).
        beyond = shared.not_compared(min_steps=width)
        return [NotJudged(self.name, beyond, self.metric)] if beyond else []

    def _one(self, run, reference, w: pd.DataFrame, a: int, b: int):
        sl = slice(a, b + 1)
        delta = w["delta"].to_numpy(dtype=float)
        band = self.band(w["stderr"], w["level"], w["slope"])
        ratio = np.abs(delta[sl]) / band[sl]
        k = a + int(np.argmax(ratio))
        typical = float(np.median(delta[sl]))
        below = typical < 0
        start, end = int(w["first_step"].iloc[a]), int(w["last_step"].iloc[b])
        r, f = finite(run, self.metric), finite(reference, self.metric)
        z = float(w["z"].iloc[k])
        evidence = {
            "delta": float(delta[k]),
            "delta_median": typical,
            "band": float(band[k]),
            "band_median": float(np.median(band[sl])),
            "z": z,
            "p_value": float(2 * sps.norm.sf(abs(z))),
            "tau": float(w["tau"].iloc[k]),
            "stderr": float(w["stderr"].iloc[k]),
            "level": float(w["level"].iloc[k]),
            "n": int(w["n"].iloc[sl].sum()),
            "windows": int(b - a + 1),
            "window_steps": int(w["last_step"].iloc[k] - w["first_step"].iloc[k] + 1),
            "sigma_step": float(np.median(w["sigma_step"].iloc[sl])),
            "autocorrelation": float(np.median(w["autocorrelation"].iloc[sl])),
            "direction": "below" if below else "above",
            **_noise_evidence(r.loc[start:end], f.loc[start:end], self.evidence_points),
        }
        hint = self._hint(run, reference, start, end, typical, evidence)
        score = float(ratio.max())
        message = (f"{self.metric} {abs(typical):.3f} {'below' if below else 'above'} the reference over "
                   f"{b - a + 1:,} windows (median of the window medians; each had to clear ±{np.median(band[sl]):.3f}, "
                   f"3 x the spread of two runs of one recipe): {hint}")
        return self._detection(run, reference, self.metric, start, end, int(w["mid_step"].iloc[k]),
                               score, severity_for(score, self.critical_ratio), message, evidence,
                               known=int(w["last_step"].iloc[a + self.persist_windows - 1]))

    def _hint(self, run, reference, start: int, end: int, typical: float, evidence: dict) -> str:
        """What the held-out loss did over the same steps, where both runs evaluated it: a lower
        train loss is memorization only if held-out did not follow."""
        if typical > 0:
            return "the run learns slower than its reference"
        held = over_sets(heldout_pairs(run, reference))
        held = held[(held["step"] >= start) & (held["step"] <= end)]
        if held.empty:
            return "lower train loss than the reference (no held-out loss over these steps to tell a better run " \
                   "from one that sees repeated data)"
        followed = float(np.median(held["delta"]))
        evidence["heldout_delta_median"] = followed
        if followed <= 0.5 * typical:
            return f"held-out loss followed ({followed:+.3f}): a better run, not repeated data"
        return (f"held-out loss did not follow ({followed:+.3f}): the signature of repeated data, which "
                f"the memorization detector tests at held-out checkpoints")


def _noise_evidence(r, f, limit: int) -> dict:
    """Per-step noise of each run around its monotone (isotonic) loss envelope, and how much of
    it the two share: runs fed the same batches in the same order share most of their noise."""
    common = r.index.intersection(f.index)[-limit:]
    if len(common) < 10:
        return {}
    res = []
    for s in (r, f):
        y = s.loc[common].to_numpy()
        # The bare PAVA solver behind IsotonicRegression: the points are already in step order,
        # and the estimator's checks cost more than the fit on a few hundred points.
        res.append(y - isotonic_regression(y, increasing=False))
    sr, sf = mad_sigma(res[0]), mad_sigma(res[1])
    corr = float(np.corrcoef(res[0], res[1])[0, 1]) if sr > 0 and sf > 0 else float("nan")
    return {"sigma_run": sr, "sigma_reference": sf, "noise_correlation": corr}
