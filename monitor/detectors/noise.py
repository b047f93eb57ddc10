"""The noise that separates two runs of one recipe, and z statistics that account for it.

Two seeds of one recipe do not differ by a wiggle that averages out inside a window: one of them
is ahead, by an offset that persists for thousands of steps. On the 13 repeats of one
modded-nanogpt config the window-to-window noise of train loss (run - reference, 100 steps) has a
standard error of ~0.0005 nats, while the 100-step medians of two seeds sit 0.007-0.009 nats apart
(standard deviation over the 78 pairs): a z built on the window's own standard error is 15x too
large. So every comparison with a reference adds a between-run term tau to the variance:

    z = d / sqrt(se^2 + tau^2),   tau^2 = (level * L)^2 + (timing * S)^2

where L is the reference's loss there and S = |dL / d ln(step)| its slope on a log-step axis. The
first term is a persistent offset proportional to the loss (the repeats' spread is 0.20-0.24% of the
loss all through training); the second is timing (two seeds reach a loss a few percent of steps
apart, which matters while the loss falls fast). `level` and `timing` are fitted by maximum
likelihood on the calibration half of the real pairs (bench/bench_quality.py), never on the pairs
the benchmark reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from .stats import shift_band

# Step stretch used to measure a curve's slope on a log-step axis: +-5% of the step is short enough
# to be local, long enough that the window medians it reads are not one noisy point apart.
SLOPE_STRETCH = 0.05


@dataclass(frozen=True)
class BetweenRunNoise:
    """Standard deviation of the persistent difference between two runs of one recipe."""

    level: float
    """Share of the loss level (0.002: two seeds at a loss of 3.3 sit ~0.007 nats apart)."""
    timing: float
    """Relative step shift between two seeds, as a fraction of ln(step)."""

    def tau(self, level: np.ndarray, slope: np.ndarray, floor: np.ndarray | float = 0.0) -> np.ndarray:
        """The between-run standard deviation at reference loss `level` and log-step `slope`, or
        `floor` where that is larger (an eval set's own lasting offset: checkpoints.eval_set_offset)."""
        level = np.abs(np.asarray(level, dtype=float))
        slope = np.abs(np.nan_to_num(np.asarray(slope, dtype=float), nan=0.0))
        return np.fmax(np.hypot(self.level * level, self.timing * slope), floor)

    def z(self, delta: np.ndarray, stderr: np.ndarray, level: np.ndarray, slope: np.ndarray,
          floor: np.ndarray | float = 0.0) -> np.ndarray:
        """delta / sqrt(stderr^2 + tau^2): NaN where the standard error is unknown (never zero)."""
        total = np.hypot(np.asarray(stderr, dtype=float), self.tau(level, slope, floor))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(np.isfinite(total) & (total > 0), np.asarray(delta, dtype=float) / total, np.nan)


def log_slope(steps: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """|d value / d ln(step)| of a curve known at `steps`, at the steps `at` (central difference
    over a +-SLOPE_STRETCH stretch of the step, read off the curve by linear interpolation)."""
    if len(steps) < 2:
        return np.zeros(len(np.asarray(at)))
    band = shift_band(np.asarray(steps, dtype=float), np.asarray(values, dtype=float),
                      np.asarray(at, dtype=float), SLOPE_STRETCH)
    # shift_band is half the change between at*(1 - stretch) and at*(1 + stretch), which lie
    # 2 atanh(stretch) apart in ln(step).
    return band / math.atanh(SLOPE_STRETCH)


def fit_noise(delta: np.ndarray, stderr: np.ndarray, level: np.ndarray, slope: np.ndarray) -> BetweenRunNoise:
    """Maximum-likelihood `level` and `timing` for differences of clean pairs: each delta is taken
    as N(0, stderr^2 + tau^2). Points are treated as independent; the persistent offsets make
    neighbouring windows of one pair alike, which leaves the estimate unbiased but its precision
    lower than the point count suggests."""
    delta, stderr, level, slope = (np.asarray(a, dtype=float) for a in (delta, stderr, level, slope))
    ok = np.isfinite(delta) & np.isfinite(stderr) & np.isfinite(level) & np.isfinite(slope)
    delta, se2, level, slope = delta[ok], stderr[ok] ** 2, np.abs(level[ok]), np.abs(slope[ok])

    def nll(log_params: np.ndarray) -> float:
        a, b = np.exp(log_params)
        var = se2 + (a * level) ** 2 + (b * slope) ** 2
        return float(np.sum(np.log(var) + delta ** 2 / var))

    start = np.log([max(np.std(delta) / max(np.median(level), 1e-9), 1e-6), 1e-3])
    best = optimize.minimize(nll, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6})
    a, b = np.exp(best.x)
    return BetweenRunNoise(level=float(a), timing=float(b))


# Fitted by `python -m bench.quality.calibrate` on the calibration half of the real pairs
# (bench/quality/corpus.py), never on the test half, the widest of the per-family fits kept;
# tests/bench/test_quality.py refits them and checks these values.
TRAIN_NOISE = BetweenRunNoise(level=0.00207, timing=0.00404)
"""Train loss, 100-step window medians of run - reference: 315 windows of 21 pairs of repeats."""
HELDOUT_NOISE = BetweenRunNoise(level=0.00219, timing=0.0)
"""Held-out loss at checkpoints, run - reference as the median over the sets both log: the repeats'
fit on 189 checkpoints of 21 pairs (the OLMo ladder reruns fit 0.00019, ten times closer)."""
FOLLOW_NOISE = BetweenRunNoise(level=0.00103, timing=0.0)
"""The memorization follow statistic, held-out minus half the train difference: 210 checkpoints
of 21 pairs of repeats."""
