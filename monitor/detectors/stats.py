"""Robust statistics the detectors share: noise scales, window summaries, runs of flags.

Everything here is vectorised NumPy so that a 1.4M-step run is summarised in tens of
milliseconds; nothing here knows about metrics or runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import ndimage

# Scale factor that turns a median absolute deviation into a standard deviation for Gaussian
# data: 1 / Phi^-1(3/4).
MAD_TO_SIGMA = 1.482602218505602

# Standard error of a sample median relative to that of the mean for Gaussian data: sqrt(pi/2).
MEDIAN_SE_FACTOR = 1.2533141373155001


def trailing_median(values: np.ndarray, window: int, min_count: int | None = None) -> np.ndarray:
    """Median of each value's window of `window` values ending at it, NaN where fewer than
    `min_count` (default: all of them) precede it: pandas' rolling median, bit for bit. A finite
    series (what every detector passes) goes through scipy's rank filter, two passes of it for an
    even window, at a fraction of the cost (bench/RESULTS.md, design measurements); one holding NaN
    through pandas itself."""
    v = np.asarray(values, dtype=float)
    need = min(window, min_count or window)
    if not np.isfinite(v).all() or v.size < window:
        return pd.Series(v).rolling(window, min_periods=need).median().to_numpy()
    # The footprint's centre is at window // 2; this origin puts its last value on the output.
    origin = window - 1 - window // 2
    hi = ndimage.rank_filter(v, window // 2, size=window, origin=origin)
    out = hi if window % 2 else (ndimage.rank_filter(v, window // 2 - 1, size=window, origin=origin) + hi) / 2.0
    # The first window - 1 values have a shorter window (the filter padded it): pandas' own
    # expanding medians there (one pass, where a median of each prefix cost a Python call a value
    # in the watch service's every update of a tail this long).
    head = v[:window - 1]
    out[:window - 1] = pd.Series(head).rolling(window, min_periods=need).median().to_numpy()
    return out


def mad_sigma(values: np.ndarray) -> float:
    """Robust standard deviation (scaled MAD) of the finite values; NaN when there are none."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan")
    return float(MAD_TO_SIGMA * np.median(np.abs(v - np.median(v))))


def cadence(steps: np.ndarray) -> float:
    """The usual distance between consecutive logged steps (median of the positive differences)."""
    s = np.asarray(steps, dtype=float)
    if s.size < 2:
        return 1.0
    d = np.diff(s)
    d = d[d > 0]
    return float(np.median(d)) if d.size else 1.0


def effective_n(n: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Independent samples in n AR(1)-correlated ones: n (1 - rho) / (1 + rho), at least 1.

    Successive training losses are correlated (smoothing, shared batches), so a window of n
    points carries less information than n independent draws; ignoring it makes bands too narrow.
    """
    r = np.clip(np.nan_to_num(rho, nan=0.0), 0.0, 0.95)
    return np.maximum(np.asarray(n, dtype=float) * (1.0 - r) / (1.0 + r), 1.0)


@dataclass
class Windows:
    """Per-window summaries of a series cut into fixed step windows (window id = step // width)."""

    ids: np.ndarray  # window id of each summarised window
    first_step: np.ndarray
    last_step: np.ndarray
    mid_step: np.ndarray  # the logged step in the middle of the window
    n: np.ndarray  # finite points in the window
    median: np.ndarray
    sigma: np.ndarray  # robust per-point standard deviation inside the window
    rho: np.ndarray  # lag-1 autocorrelation of the deviations from the window median

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def median_se(self) -> np.ndarray:
        """Standard error of each window median, autocorrelation accounted for."""
        return MEDIAN_SE_FACTOR * self.sigma / np.sqrt(effective_n(self.n, self.rho))


def window_summaries(steps: np.ndarray, values: np.ndarray, width: float, medians_only: bool = False) -> Windows:
    """Median, robust spread and lag-1 autocorrelation of `values` in windows of `width` steps
    (with `medians_only`, spread and autocorrelation are left NaN and cost nothing).

    Windows are aligned to multiples of `width` on the step axis, so the same step always falls
    in the same window whether a run is summarised whole or piece by piece (incremental mode).
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=float)
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if steps.size == 0:
        ints, floats = np.array([], dtype=np.int64), np.array([], dtype=float)
        return Windows(ints, ints, ints, ints, ints, floats, floats, floats)
    ids = np.floor_divide(steps, width).astype(np.int64)
    uniq, start = np.unique(ids, return_index=True)
    counts = np.diff(np.append(start, ids.size))
    width_max = int(counts.max())
    # Pad the ragged windows into one rectangle so medians run as one vectorised call.
    grid = np.full((uniq.size, width_max), np.nan)
    row = np.repeat(np.arange(uniq.size), counts)
    col = np.arange(ids.size) - np.repeat(start, counts)
    grid[row, col] = values
    med = row_medians(grid)
    if medians_only:
        sigma = rho = np.full(uniq.size, np.nan)
    else:
        dev = grid - med[:, None]
        sigma = MAD_TO_SIGMA * row_medians(np.abs(dev))
        lagged = np.nansum(dev[:, 1:] * dev[:, :-1], axis=1)
        power = np.nansum(dev * dev, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = np.where(power > 0, lagged / power, 0.0)
    last = start + counts - 1
    mid = start + (counts - 1) // 2
    return Windows(uniq, steps[start], steps[last], steps[mid], counts, med, sigma, rho)


def row_medians(grid: np.ndarray) -> np.ndarray:
    """Median of the finite values of each row (NaN for a row with none).

    np.nanmedian on many short rows goes through masked arrays and costs ~10x more; sorting
    puts NaN last, so each row's median sits at the middle of its finite prefix.
    """
    ordered = np.sort(grid, axis=1)
    count = np.sum(np.isfinite(grid), axis=1)
    rows = np.arange(grid.shape[0])
    lo = np.clip((count - 1) // 2, 0, None)
    hi = np.clip(count // 2, 0, grid.shape[1] - 1)
    med = (ordered[rows, lo] + ordered[rows, hi]) / 2.0
    return np.where(count > 0, med, np.nan)


def true_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) indices of each run of consecutive True values."""
    m = np.asarray(mask, dtype=bool)
    if not m.any():
        return []
    edges = np.diff(np.concatenate(([0], m.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return list(zip(starts.tolist(), ends.tolist()))


def signed_runs(mask: np.ndarray, sign: np.ndarray, ids: np.ndarray | None = None,
                min_length: int = 1) -> list[tuple[int, int]]:
    """Runs of flagged entries that share one sign and, when `ids` is given, consecutive ids.

    A gap in the ids (a window with no data) ends a run: persistence must be seen, not assumed.
    """
    m = np.asarray(mask, dtype=bool)
    s = np.sign(np.asarray(sign, dtype=float))
    out: list[tuple[int, int]] = []
    for a, b in true_runs(m):
        start = a
        for i in range(a + 1, b + 2):
            broken = i > b or s[i] != s[i - 1] or (ids is not None and ids[i] != ids[i - 1] + 1)
            if broken:
                if i - start >= min_length:
                    out.append((start, i - 1))
                start = i
    return out


def shift_band(ref_steps: np.ndarray, ref_values: np.ndarray, at: np.ndarray,
               tolerance: float) -> np.ndarray:
    """How far the reference moves when its step axis is stretched by +-tolerance around `at`.

    Two runs of one recipe reach the same loss a few percent of steps apart early in training,
    when the loss falls fastest; a difference no larger than that is timing, not divergence.
    """
    at = np.asarray(at, dtype=float)
    if tolerance <= 0 or len(ref_steps) < 2:
        return np.zeros_like(at)
    lo = np.interp(at * (1.0 - tolerance), ref_steps, ref_values)
    hi = np.interp(at * (1.0 + tolerance), ref_steps, ref_values)
    return np.abs(hi - lo) / 2.0
