"""Smoothing for charts: TensorBoard's debiased exponential moving average.

TensorBoard (and W&B's "exponential moving average" setting) smooths a scalar series y as
    last = w * last + (1 - w) * y_i,   smoothed_i = last / (1 - w ** n_i)
with last starting at 0 and n_i the finite values seen so far; dividing by 1 - w**n removes the
pull towards 0 of the first points. Non-finite values pass through unchanged and do not enter the
average, and a constant series is returned as is. w = 0 is no smoothing; TensorBoard's slider runs
from 0 to 0.999.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

MAX_WEIGHT = 0.999


def ema_debiased(values: np.ndarray, weight: float) -> np.ndarray:
    """The smoothed series (same length as `values`); `weight` in [0, MAX_WEIGHT]."""
    if not 0.0 <= weight <= MAX_WEIGHT:
        raise ValueError(f"smoothing weight must be in [0, {MAX_WEIGHT}], not {weight}")
    y = np.asarray(values, dtype=float)
    out = y.copy()
    finite = np.isfinite(y)
    if weight == 0.0 or finite.sum() == 0 or np.all(y[finite] == y[finite][0]):
        return out
    kept = y[finite]
    # lfilter runs last_i = w * last_(i-1) + (1 - w) * y_i from last = 0, in C.
    last = lfilter([1.0 - weight], [1.0, -weight], kept)
    seen = np.arange(1, len(kept) + 1, dtype=float)
    out[finite] = last / (1.0 - weight ** seen)
    return out
