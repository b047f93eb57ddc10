"""The held-out pairing's measurement error where every pair is interpolated."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.detectors.checkpoints import measurement_error

# Interpolation errors as the model gives them along a run paired only by interpolation: large
# where the early curve bends, small later.
INTERP = np.array([0.02, 0.014, 0.009, 0.006, 0.004, 0.003, 0.0025, 0.002])
EVAL_NOISE = 0.001


def interpolated_pairs(delta: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"step": np.arange(1, delta.size + 1) * 250, "run": 3.0, "reference": 3.0,
                         "delta": delta, "interp_error": INTERP, "exact": False, "logged_se": np.nan})


def test_interpolation_errors_are_not_counted_twice():
    """The second differences of interpolated pairs carry the interpolation errors; counted once in
    that scatter and again on their own, the last checkpoint's error came out 2.6 times the truth."""
    rng = np.random.default_rng(0)
    last = []
    for _ in range(300):
        delta = 0.004 + rng.normal(0, EVAL_NOISE, INTERP.size) + rng.normal(0, 1, INTERP.size) * INTERP
        last.append(measurement_error(interpolated_pairs(delta))[-1])
    last = np.array(last)
    truth = np.hypot(EVAL_NOISE, INTERP[-1])
    assert np.all(last >= INTERP[-1])  # never below the checkpoint's own interpolation error
    assert 1.0 <= np.median(last) / truth < 1.6


def test_the_error_is_unknown_before_four_pairs():
    se = measurement_error(interpolated_pairs(np.full(INTERP.size, 0.004)))
    assert np.isnan(se[:3]).all() and np.isfinite(se[3:]).all()
