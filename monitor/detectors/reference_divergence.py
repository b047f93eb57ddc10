"""Reference divergence: the run's train loss leaves its reference's, persistently and by more
than two seeds of one recipe ever differ.

On the aligned axis, d = run - reference is cut into windows of `window_points` logged steps.
Each window's median of d (a median, so spikes either run has, shared or not, cannot move it) is
compared with

* its standard error, from the robust spread of d inside the window and the lag-1
  autocorrelation of d (successive losses are correlated, so n points are worth fewer), and
* an effect band: `min_effect`, plus how far the reference itself moves when its step axis is
  stretched by `step_shift_tolerance` (early in training two seeds reach a loss a few percent of
  steps apart, and that is timing, not divergence).

A window counts when |median| exceeds the band and `z_threshold` standard errors; a detection is
`persist_windows` consecutive counting windows of one sign. The direction is reported: below the
reference is what repeated data looks like (see the memorization detector), above is slower
learning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import stats as sps
from sklearn.isotonic import isotonic_regression

from monitor.schema import TRAIN_LOSS, RunData, Severity

from .base import Detector, ReferenceUse
from .rundata import finite
from .stats import cadence, mad_sigma, shift_band, signed_runs, window_summaries


@dataclass
class ReferenceDivergence(Detector):
    name: ClassVar[str] = "reference_divergence"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.REQUIRED

    metric: str = TRAIN_LOSS
    """The metric compared with the reference."""
    window_points: int = 100
    """Logged steps per window."""
    min_effect: float = 0.05
    """Largest gap between window medians of train loss for any two of the 13 identical-config
    repeats (modded-nanogpt valueembed_seeds, 100-step windows): 0.025 nats, 0.040 nats with
    25-step windows in the first 300 steps. 0.05 sits above every seed-to-seed difference."""
    z_threshold: float = 3.0
    """Three standard errors: a 0.27% two-sided chance per window under pure noise, and persistence
    makes a false run of windows far rarer still."""
    persist_windows: int = 3
    """Consecutive counting windows of one sign that make a detection."""
    step_shift_tolerance: float = 0.02
    """Seeds of one recipe reach the same loss within ~2% of the steps in the repeats' first few
    hundred steps, when the loss falls fastest; that much timing is not divergence."""
    min_window_fill: float = 0.5
    """A window needs at least half its points to be judged (first/last windows are partial)."""
    critical_ratio: float = 3.0
    """Effect three times the band: far outside anything noise or seeds produce."""
    evidence_points: int = 20_000
    """Points of the interval used for the per-run noise evidence (isotonic fits); bounded so that
    evidence for a million-step interval costs milliseconds."""

    def columns(self, run: RunData) -> list[str]:
        return [self.metric]

    def lookback(self, step_cadence: float) -> float:
        return (self.persist_windows + 2) * self.window_points * step_cadence

    def reference_spans(self, lo: float, hi: float, step_cadence: float) -> list[tuple[float, float]]:
        """The judged range, and the two ranges the step-shift band reads (a stretch of the
        judged range by -+tolerance), not all the reference in between."""
        back = self.lookback(step_cadence)
        width = self.window_points * step_cadence
        tol = self.step_shift_tolerance
        lo -= back
        return [(lo * (1 - tol) - width, hi * (1 - tol) + width), (lo - width, hi + width),
                (lo * (1 + tol) - width, hi * (1 + tol) + width)]

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        if reference is None:
            return []
        r = finite(run, self.metric)
        f = finite(reference, self.metric)
        common = r.index.intersection(f.index)
        if len(common) < self.persist_windows * 2:
            return []
        steps = common.to_numpy()
        d = r.loc[common].to_numpy() - f.loc[common].to_numpy()
        width = self.window_points * cadence(steps)
        w = window_summaries(steps, d, width)
        ref_w = window_summaries(f.index.to_numpy(), f.to_numpy(), width, medians_only=True)
        band = self.min_effect + shift_band(ref_w.mid_step, ref_w.median, w.mid_step,
                                            self.step_shift_tolerance)
        se = w.median_se
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(se > 0, w.median / se, np.sign(w.median) * np.inf)
        full = w.n >= self.min_window_fill * self.window_points
        flag = full & (np.abs(w.median) > band) & (np.abs(z) > self.z_threshold)
        out = []
        for a, b in signed_runs(flag, w.median, w.ids, self.persist_windows):
            out.append(self._one(run, reference, r, f, w, band, z, a, b))
        return out

    def _one(self, run, reference, r, f, w, band, z, a, b):
        sl = slice(a, b + 1)
        ratio = np.abs(w.median[sl]) / band[sl]
        k = a + int(np.argmax(ratio))
        delta = float(w.median[k])
        below = delta < 0
        start, end = int(w.first_step[a]), int(w.last_step[b])
        noise = _noise_evidence(r.loc[start:end], f.loc[start:end], self.evidence_points)
        evidence = {
            "delta": delta,
            "delta_median": float(np.median(w.median[sl])),
            "band": float(band[k]),
            "z": float(z[k]),
            "p_value": float(2 * sps.norm.sf(abs(z[k]))),
            "n": int(w.n[sl].sum()),
            "windows": int(b - a + 1),
            "window_steps": int(w.last_step[k] - w.first_step[k] + 1),
            "sigma_step": float(np.median(w.sigma[sl])),
            "autocorrelation": float(np.median(w.rho[sl])),
            "direction": "below" if below else "above",
            **noise,
        }
        score = float(ratio.max())
        severity = Severity.CRITICAL if score >= self.critical_ratio else Severity.WARNING
        if below:
            hint = ("lower train loss than the reference; if held-out loss did not follow, the run "
                    "is seeing repeated data (see memorization)")
        else:
            hint = "the run learns slower than its reference"
        message = (f"{self.metric} {abs(delta):.3f} {'below' if below else 'above'} the reference "
                   f"(band ±{band[k]:.3f}, z={z[k]:.1f}) for {b - a + 1} windows: {hint}")
        return self._detection(run, reference, self.metric, start, end, int(w.mid_step[k]),
                               score, severity, message, evidence)


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
