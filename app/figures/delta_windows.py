"""Run minus reference in the windows the reference-divergence detector judges, with the band each
had to clear: what the train-loss delta chart draws, in the report and on the dashboard alike.

The detector that declares the drawing (`Drawing.DELTA_BAND`) gives the window width for a logging
interval, the band `band(stderr, level, slope)` and the share of its values a window needs to be
judged (`min_window_fill`). From every logged value the windows are the detector's own: the band is
the one each window had to clear, and a window the detector leaves unjudged (the last one of a run,
still filling) is not drawn either. A dashboard view wider than the rows it may read gets the
store's bucket means instead (`values_per_point` > 1): medians of bucket means, and a standard error
estimated from their spread (`_bucket_stderr`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.detectors import drawn_by
from monitor.detectors.noise import log_slope
from monitor.detectors.stats import MAD_TO_SIGMA, MEDIAN_SE_FACTOR, Windows, cadence, window_summaries
from monitor.schema import Drawing

# Most windows of the delta across a view: about one per 6 px of a full-width chart. A zoomed-out
# view of a million steps would otherwise hold ten thousand detector windows.
DEFAULT_DELTA_WINDOWS = 200
FILL_WITHOUT_DETECTOR = 0.5
"""The share of its values a window needs to be drawn when no detector declares the band (and so
no fill of its own): the divergence detector's default."""
MIN_BUCKETS_PER_WINDOW = 4
"""Bucket means a window of them spans at least: its median is then not one bucket's mean."""
SPREAD_BUCKETS = 128
"""Successive differences of bucket means whose median gives the spread at a window: a median
absolute deviation of 128 values is uncertain by about 10% of itself (1.17/sqrt(128)), and 128
buckets of a run logged every step (8,192 steps) are a quarter of the narrowest view read as bucket
means, far fewer steps than a run's noise level changes over."""


@dataclass(frozen=True)
class _Overlap:
    x: np.ndarray
    """The run's x inside the reference's."""
    delta: np.ndarray
    """Run - reference there (the reference interpolated at the run's x)."""
    ref_x: np.ndarray
    ref_y: np.ndarray
    last: float
    """The run's last finite x: where its logging has reached."""


def delta_points(run: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """(x, delta): the run minus the reference interpolated at the run's points, where both exist."""
    pair = _overlap(run, reference)
    if pair is None:
        return _empty("x", "delta")
    return pd.DataFrame({"x": pair.x, "delta": pair.delta})


def reference_delta(run: pd.DataFrame, reference: pd.DataFrame, max_windows: int = DEFAULT_DELTA_WINDOWS,
                    params: dict | None = None, values_per_point: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run minus reference where both exist, as the detector that draws the delta band judges it.

    Returns (windows, points): `points` as `delta_points`; `windows` (x, delta, band, n), the
    detector's windows (`window_width(logging interval)`, built with its entry of `params`, as
    the run was judged) that it would judge. Where a view would hold more than `max_windows`,
    consecutive windows are drawn k at a time: the median of their medians (as a finding quotes
    them) and of their bands, drawn where at least `min_window_fill` of the k were judged. `band`
    is NaN when no detector declares one.

    `run` and `reference` are frames (step, value [, x]) of every logged value, or, with
    `values_per_point` > 1, of bucket means that each average that many logged values.
    """
    detector = drawn_by(Drawing.DELTA_BAND, params)
    pair = _overlap(run, reference)
    if pair is None:
        return _empty("x", "delta", "band", "n"), _empty("x", "delta")
    points = pd.DataFrame({"x": pair.x, "delta": pair.delta})
    spacing = cadence(pair.x)
    interval = spacing / max(values_per_point, 1.0)  # between logged values
    width = detector.window_width(interval) if detector is not None else interval
    fill = detector.min_window_fill if detector is not None else FILL_WITHOUT_DETECTOR
    k = max(1, math.ceil((pair.x[-1] - pair.x[0]) / max_windows / width))
    if values_per_point > 1:
        k = max(k, math.ceil(MIN_BUCKETS_PER_WINDOW * spacing / width))
        windows = _from_bucket_means(pair, detector, width, k, spacing, fill, values_per_point, width / interval)
    else:
        windows = _judged(pair, detector, width, k, interval, fill)
    return windows, points


def _judged(pair: _Overlap, detector, width: float, k: int, interval: float, fill: float) -> pd.DataFrame:
    """The detector's own windows of every logged value, the judged ones k at a time."""
    w = window_summaries(pair.x, pair.delta, width)
    band = _band(detector, pair, w, width, np.nan_to_num(w.median_se, nan=0.0))
    judged = _complete(w, width, interval, pair.last, fill)
    frame = pd.DataFrame({"group": w.ids[judged] // k, "x": w.mid_step[judged].astype(float),
                          "delta": w.median[judged], "band": band[judged], "n": w.n[judged].astype(float)})
    grouped = frame.groupby("group", sort=True)
    out = grouped[["x", "delta", "band"]].median().assign(n=grouped["n"].sum(), windows=grouped.size())
    out = out[out["windows"] >= fill * k]
    return out[["x", "delta", "band", "n"]].reset_index(drop=True)


def _from_bucket_means(pair: _Overlap, detector, width: float, k: int, spacing: float, fill: float,
                       values_per_point: float, values_per_window: float) -> pd.DataFrame:
    """Windows k detector windows wide of bucket means (`spacing` apart, each of
    `values_per_point` logged values), whose band takes the standard error of one detector window
    (`values_per_window` logged values)."""
    w = window_summaries(pair.x, pair.delta, k * width, medians_only=True)
    judged = _complete(w, k * width, spacing, pair.last, fill)
    stderr = _bucket_stderr(pair, w.mid_step, values_per_point / values_per_window)
    band = _band(detector, pair, w, k * width, stderr)
    return pd.DataFrame({"x": w.mid_step[judged].astype(float), "delta": w.median[judged], "band": band[judged],
                         "n": (w.n[judged] * values_per_point).astype(float)})


def _bucket_stderr(pair: _Overlap, at: np.ndarray, share: float) -> np.ndarray:
    """The standard error of a detector window's median at each x `at`, from bucket means that
    each hold `share` of a window's logged values.

    A bucket mean of m logged values scatters by sigma_eff / sqrt(m), where sigma_eff is the
    per-value spread widened by the values' correlation, which the detector's standard error
    (MEDIAN_SE_FACTOR x sigma / sqrt(effective n)) accounts for as well: a window of n values has
    MEDIAN_SE_FACTOR x (bucket scatter) x sqrt(m / n). The scatter is the median of successive
    differences (a slow drift of the delta cancels in them) over SPREAD_BUCKETS neighbours. It
    trades exactness for a bounded read: a bucket mean keeps the outliers a window median
    ignores, so on heavy-tailed losses the band errs wide (its median 1.35x the detector's on the
    real muon/adamw pair of modded-nanogpt, 0.98x on bench.wide_pair's synthetic one)."""
    if len(pair.x) < 3:
        return np.full(len(at), np.nan)
    steps = np.abs(np.diff(pair.delta))
    local = pd.Series(steps).rolling(SPREAD_BUCKETS, center=True, min_periods=1).median().to_numpy()
    scatter = MAD_TO_SIGMA * local / math.sqrt(2.0)
    between = (pair.x[1:] + pair.x[:-1]) / 2
    return MEDIAN_SE_FACTOR * np.interp(at, between, scatter) * math.sqrt(share)


def _band(detector, pair: _Overlap, w: Windows, width: float, stderr: np.ndarray) -> np.ndarray:
    """The detector's band at windows `w`: the reference's median in the same window and its
    log-step slope set the between-run part, as in its `windows`."""
    if detector is None:
        return np.full(len(w), np.nan)
    ref_w = window_summaries(pair.ref_x, pair.ref_y, width, medians_only=True)
    level = pd.Series(ref_w.median, index=ref_w.ids).reindex(w.ids).to_numpy()
    return detector.band(stderr, level, log_slope(ref_w.mid_step, ref_w.median, w.mid_step))


def _complete(w: Windows, width: float, spacing: float, last: float, fill: float) -> np.ndarray:
    """The detector's rule for a window it judges: its last value has been logged, and it holds
    `fill` of the values its width does."""
    return ((w.ids + 1) * width - spacing <= last) & (w.n >= fill * width / spacing)


def _overlap(run: pd.DataFrame, reference: pd.DataFrame) -> _Overlap | None:
    rx, ry = _finite(run)
    fx, fy = _finite(reference)
    if len(rx) == 0 or len(fx) == 0:
        return None
    # Series come sorted and (nearly always) wholly finite and overlapping: the filters and the
    # sort then keep every point in place, so they are skipped rather than copying a 1.4M-step
    # series to itself several times over.
    if np.any(fx[1:] < fx[:-1]):
        order = np.argsort(fx, kind="stable")
        fx, fy = fx[order], fy[order]
    last = float(rx[-1])
    inside = (rx >= fx[0]) & (rx <= fx[-1])
    if not inside.all():
        rx, ry = rx[inside], ry[inside]
    del inside
    if len(rx) == 0:
        return None
    return _Overlap(rx, ry - np.interp(rx, fx, fy), fx, fy, last)


def _finite(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    x = (frame["x"] if "x" in frame else frame["step"]).to_numpy().astype(float)
    y = frame["value"].to_numpy(dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    return (x, y) if keep.all() else (x[keep], y[keep])


def _empty(*columns: str) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=float) for c in columns})
