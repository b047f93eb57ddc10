"""Held-out losses of a run and its reference paired checkpoint by checkpoint, whatever their
evaluation cadences.

A run is judged at its own checkpoints, where its model was evaluated. The reference's value there
is its own evaluation at that step when it made one, else the linear interpolation (on ln step) of
its two bracketing evaluations, with the interpolation error estimated from the curvature that a
third neighbouring evaluation shows. A run that evaluates less often than its reference is judged
less often, never on invented values of its own; a reference that evaluates less often, or at
other steps, or on another token axis, still pairs with every run checkpoint inside its range.

The measurement error of each difference is the logged standard errors where both runs log them,
else estimated from the difference curve itself: run - reference of two runs of one recipe is
smooth (their shared schedule cancels), so its checkpoint-to-checkpoint second differences measure
the eval noise (var(d2) = 6 sigma^2 for independent noise). The estimate at a checkpoint uses only
earlier checkpoints and that one, so it never changes as later evaluations arrive; before
`MIN_NOISE_POINTS` paired checkpoints exist the error is unknown and the checkpoint is not judged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.schema import RunData

from .eval_keys import heldout_sets
from .rundata import finite
from .stats import MAD_TO_SIGMA, MEDIAN_SE_FACTOR

# Second differences need three paired checkpoints each; a robust spread needs at least three of
# them, so five paired checkpoints before the first verdict.
MIN_NOISE_POINTS = 5
# The noise estimate reads the last eight paired checkpoints: local enough to follow a change of
# eval set size or cadence, enough second differences (six) for a median.
NOISE_WINDOW = 8
# An interpolation bracket wider than this many of the reference's usual eval intervals is a gap
# in its log (a crashed eval job), not a cadence: nothing is paired across it.
MAX_BRACKET_FACTOR = 2.5

PAIR_COLUMNS = ("step", "run", "reference", "delta", "interp_error", "exact", "logged_se")


def pair_series(run_values: pd.Series, ref_values: pd.Series, run_se: pd.Series | None = None,
                ref_se: pd.Series | None = None) -> pd.DataFrame:
    """One row per run checkpoint (step > 0) that the reference can be paired with: the run's value,
    the reference's (exact or interpolated), their difference, the interpolation error, whether the
    reference evaluated at that very step, and the logged standard error of the difference (NaN
    unless both runs log one)."""
    r = run_values[(run_values.index > 0) & np.isfinite(run_values.to_numpy(dtype=float))]
    f = ref_values[(ref_values.index > 0) & np.isfinite(ref_values.to_numpy(dtype=float))]
    if r.empty or f.empty:
        return empty_pairs()
    c = r.index.to_numpy(dtype=float)
    rs = f.index.to_numpy(dtype=float)
    fv = f.to_numpy(dtype=float)
    pos = np.searchsorted(rs, c)
    at = np.clip(pos, 0, rs.size - 1)
    exact = rs[at] == c
    lo = np.clip(pos - 1, 0, rs.size - 1)
    hi = np.clip(pos, 0, rs.size - 1)
    usual = float(np.median(np.diff(rs))) if rs.size > 1 else np.inf
    bracketed = (pos > 0) & (pos < rs.size) & (rs[hi] - rs[lo] <= MAX_BRACKET_FACTOR * usual)
    x, x0, x1 = np.log(c), np.log(rs[lo]), np.log(rs[hi])
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(x1 > x0, (x - x0) / (x1 - x0), 0.0)
    linear = (1 - w) * fv[lo] + w * fv[hi]
    value = np.where(exact, fv[at], linear)
    error = np.where(exact, 0.0, _curvature_error(np.log(rs), fv, lo, hi, x, linear))
    keep = exact | bracketed
    logged = np.full(c.size, np.nan)
    if run_se is not None and ref_se is not None:
        se_r = run_se.reindex(r.index).to_numpy(dtype=float)
        se_f = np.interp(c, ref_se.index.to_numpy(dtype=float), ref_se.to_numpy(dtype=float),
                         left=np.nan, right=np.nan) if len(ref_se) else np.full(c.size, np.nan)
        logged = np.hypot(se_r, se_f)
    out = pd.DataFrame({"step": r.index.to_numpy()[keep], "run": r.to_numpy(dtype=float)[keep],
                        "reference": value[keep], "interp_error": error[keep], "exact": exact[keep],
                        "logged_se": logged[keep]})
    out["delta"] = out["run"] - out["reference"]
    return out[list(PAIR_COLUMNS)].reset_index(drop=True)


def _curvature_error(x: np.ndarray, v: np.ndarray, lo: np.ndarray, hi: np.ndarray, at: np.ndarray,
                     linear: np.ndarray) -> np.ndarray:
    """How far the curve bends away from the chord between its points lo and hi at `at`: the gap
    between the chord and the parabola through lo, hi and a third neighbour (the larger of the two
    neighbours where both exist). Without a third point, the largest deviation a monotone curve can
    have between the two: half their difference."""
    worst = np.full(at.size, np.nan)
    for third in (lo - 1, hi + 1):
        ok = (third >= 0) & (third < x.size)
        t = np.clip(third, 0, x.size - 1)
        quad = _parabola(x[lo], v[lo], x[hi], v[hi], x[t], v[t], at)
        gap = np.where(ok, np.abs(quad - linear), np.nan)
        worst = np.fmax(worst, gap)
    fallback = np.abs(v[hi] - v[lo]) / 2
    return np.where(np.isfinite(worst), worst, fallback)


def _parabola(x0, y0, x1, y1, x2, y2, x):
    with np.errstate(invalid="ignore", divide="ignore"):
        l0 = (x - x1) * (x - x2) / ((x0 - x1) * (x0 - x2))
        l1 = (x - x0) * (x - x2) / ((x1 - x0) * (x1 - x2))
        l2 = (x - x0) * (x - x1) / ((x2 - x0) * (x2 - x1))
        return y0 * l0 + y1 * l1 + y2 * l2


def measurement_error(pairs: pd.DataFrame) -> np.ndarray:
    """Standard error of each paired difference: the logged one where known, else estimated from the
    second differences of the earlier paired differences (NaN before MIN_NOISE_POINTS of them); the
    interpolation error adds in quadrature."""
    d = pairs["delta"].to_numpy(dtype=float)
    estimated = np.full(d.size, np.nan)
    for i in range(MIN_NOISE_POINTS - 1, d.size):
        window = d[max(0, i + 1 - NOISE_WINDOW):i + 1]
        d2 = window[2:] - 2 * window[1:-1] + window[:-2]
        estimated[i] = MAD_TO_SIGMA * float(np.median(np.abs(d2))) / np.sqrt(6.0)
    logged = pairs["logged_se"].to_numpy(dtype=float)
    se = np.where(np.isfinite(logged), logged, estimated)
    return np.hypot(se, pairs["interp_error"].to_numpy(dtype=float))


def empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({"step": pd.Series(dtype="int64"), "run": pd.Series(dtype=float),
                         "reference": pd.Series(dtype=float), "delta": pd.Series(dtype=float),
                         "interp_error": pd.Series(dtype=float), "exact": pd.Series(dtype=bool),
                         "logged_se": pd.Series(dtype=float)})


def heldout_pairs(run: RunData, reference: RunData, stat: str = "loss") -> dict[str, pd.DataFrame]:
    """pair_series for every held-out set both runs log `stat` for: {set: pairs}."""
    ours, theirs = heldout_sets(run.scalars.columns), heldout_sets(reference.scalars.columns)
    out = {}
    for name, keys in sorted(ours.items()):
        other = theirs.get(name, {})
        if stat not in keys or stat not in other:
            continue
        se_ok = stat == "loss" and "stderr" in keys and "stderr" in other
        pairs = pair_series(finite(run, keys[stat]), finite(reference, other[stat]),
                            finite(run, keys["stderr"]) if se_ok else None,
                            finite(reference, other["stderr"]) if se_ok else None)
        if len(pairs):
            out[name] = pairs
    return out


def over_sets(per_set: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The sets together, checkpoint by checkpoint: the median of the differences across the sets
    paired there (a model that generalises differently moves every set; one odd set cannot move a
    median), the median reference value, the median interpolation error, and the logged standard
    error of that median (from the sets' logged errors, where every set logs one)."""
    if not per_set:
        return empty_pairs()
    frames = [p.assign(set=name) for name, p in per_set.items()]
    both = pd.concat(frames, ignore_index=True)
    g = both.groupby("step", sort=True)
    n = g["delta"].count()
    logged = g["logged_se"].apply(lambda s: MEDIAN_SE_FACTOR * np.sqrt(np.sum(s.to_numpy() ** 2)) / s.size
                                  if np.isfinite(s.to_numpy()).all() else np.nan)
    out = pd.DataFrame({"step": n.index.to_numpy(), "run": g["run"].median().to_numpy(),
                        "reference": g["reference"].median().to_numpy(), "delta": g["delta"].median().to_numpy(),
                        "interp_error": g["interp_error"].median().to_numpy(),
                        "exact": g["exact"].all().to_numpy(), "logged_se": logged.to_numpy(dtype=float)})
    out["sets"] = n.to_numpy()
    return out.reset_index(drop=True)
