"""Held-out losses of a run and its reference paired checkpoint by checkpoint, whatever their
evaluation cadences.

A run is judged at its own checkpoints, where its model was evaluated. The reference's value there
is its own evaluation at that step when it made one, else a monotone cubic (PCHIP) through its
evaluations on ln(step), with an interpolation error proportional to how much the curve falls
across the bracket: INTERP_ERROR_SCALE x |f(r1) - f(r0)| x w (1 - w) at the fraction w of the
bracket (r0, r1). A run that evaluates less often than its reference is judged less often, never
on invented values of its own; a reference that evaluates less often, or at other steps, or on
another token axis, still pairs with every run checkpoint inside its range. Asked for mirrored
pairs (memorization), a checkpoint whose bracket since the run's previous one holds a reference
evaluation is judged on the mean of its difference and of the difference at that evaluation, the
run interpolated there: the two interpolations err in opposite directions (pair_series). Past the
reference's last evaluation, that mirror alone pairs the checkpoint whose bracket holds it.

The measurement error of each difference is estimated from the difference curve itself: run -
reference of two runs of one recipe is smooth (their shared schedule cancels), so its
checkpoint-to-checkpoint second differences measure the eval noise (var(d2) = 6 sigma^2 for
independent noise; ~0.001 nats on the 13 repeats, where each run's own curve bends by 0.007). The
estimate at a checkpoint uses only earlier checkpoints and that one, so it never changes as later
evaluations arrive. Before `MIN_NOISE_POINTS` paired checkpoints exist, the logged standard errors
stand in where both runs log them; otherwise the error is unknown and the checkpoint is not judged.
Once the curve can be read, a logged error bounds only the lasting offset the eval set can give one
model over the other (measurement_error and eval_set_offset say why).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.interpolate import PchipInterpolator
from scipy.optimize import brentq

from monitor.schema import RunData

from .eval_keys import heldout_sets
from .rundata import finite
from .stats import MAD_TO_SIGMA, MEDIAN_SE_FACTOR

# Second differences need three paired checkpoints each; the first estimate uses two of them, so
# four paired checkpoints come before the first verdict (a short run evaluated every 250 steps has
# six). Two second differences give a rough estimate, but the between-run term, several times
# larger, dominates every test that uses it.
MIN_NOISE_POINTS = 4
# The noise estimate reads the last eight paired checkpoints: local enough to follow a change of
# eval set size or cadence, enough second differences (six) for a median.
NOISE_WINDOW = 8
# An interpolation bracket wider than this many of the reference's usual eval intervals is a gap
# in its log (a crashed eval job), not a cadence: nothing is paired across it.
MAX_BRACKET_FACTOR = 2.5
# Standard error of a PCHIP interpolation per unit of |f(r1) - f(r0)| w (1 - w): the 95th
# percentile of the actual error over that scale, divided by 1.96, measured by thinning the
# held-out evaluations of the calibration repeats 2x, 3x and 4x and interpolating the dropped ones
# (bench/quality/calibrate.py; on the test half the same band covers 95% of the errors).
INTERP_ERROR_SCALE = 0.27
# Correlation of the interpolation errors at consecutive interpolated checkpoints (both measured in
# units of their own standard error, on the same thinned calibration repeats): part of an error is
# the curve's shape, which neighbouring brackets share. Tests that pool checkpoints use it for
# their measurement errors as a whole (eval noise, which is independent, included).
INTERP_ERROR_CORRELATION = 0.44
# The same for a mirrored difference (pair_series): the mean of this checkpoint's difference and of
# the one at the reference's evaluation inside the run's last bracket, the run interpolated there,
# measured on the calibration repeats each paired with itself, evaluations alternately kept, where
# the true difference is zero (bench/quality/calibrate.py).
MIRROR_ERROR_SCALE = 0.18
# Their errors at consecutive mirrored checkpoints correlate by -0.31 on those repeats (-0.29 on the
# test half's): pooled tests, whose model correlates every pair of checkpoints alike, take 0.
MIRROR_ERROR_CORRELATION = 0.0
# Standard error, per unit of |r(c1) - r(c0)| w (1 - w) over the run's bracket, of a checkpoint
# paired past the reference's last evaluation (the run interpolated back to it through its last
# three checkpoints, which bends less surely than PCHIP through both sides of a bracket): the 95th
# percentile of the actual errors divided by 1.96, on the same self-paired calibration repeats
# (bench/quality/calibrate.py; on the test half the band covers 93% of them).
PAST_END_ERROR_SCALE = 0.41

# E[median of n squared second differences] / (6 sigma^2) for white noise of standard deviation
# sigma, n = 1 .. NOISE_WINDOW - 2: the asymptotic 0.455 of one chi-square(1) would overstate sigma by
# 25% from six second differences and by 48% from two (neighbouring second differences share
# points, which a table of independent draws would miss). Used where interpolation errors are
# part of the second differences (_eval_noise); _d2_sigma says why exact pairs keep the
# large-sample factor. Simulated, 400,000 series each
# (tests/monitor/detectors/test_checkpoints.py simulates them again).
D2_MEDIAN_FACTOR = (1.0, 1.0, 0.884, 0.837, 0.722, 0.707)

# Checkpoints of history a verdict at a new checkpoint depends on: the noise estimate's window of
# exact pairs (which may be spread among interpolated ones), and a run of flagged checkpoints.
HISTORY_CHECKPOINTS = 2 * NOISE_WINDOW + 4

PAIR_COLUMNS = ("step", "run", "reference", "delta", "interp_error", "exact", "logged_se", "mirrored")


def pair_series(run_values: pd.Series, ref_values: pd.Series, run_se: pd.Series | None = None,
                ref_se: pd.Series | None = None, mirrored: bool = False) -> pd.DataFrame:
    """One row per run checkpoint (step > 0) that the reference can be paired with: the run's value,
    the reference's (exact or interpolated), their difference, the interpolation error, whether the
    reference evaluated at that very step, and the logged standard error of the difference (NaN
    unless both runs log one).

    mirrored: where the reference evaluated between the run's previous checkpoint and this one, the
    difference is the mean of this one (the reference interpolated) and of the difference at that
    evaluation (the run interpolated through its checkpoints up to this one), with the error of
    that mean (MIRROR_ERROR_SCALE): two runs of one recipe share the curve's shape, so the two
    interpolations err in opposite directions and their errors mostly cancel."""
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
    curve = PchipInterpolator(np.log(rs), fv)(x) if rs.size > 1 else np.full(c.size, np.nan)
    value = np.where(exact, fv[at], curve)
    error = np.where(exact, 0.0, INTERP_ERROR_SCALE * np.abs(fv[hi] - fv[lo]) * w * (1 - w))
    keep = exact | bracketed
    logged = np.full(c.size, np.nan)
    if run_se is not None and ref_se is not None:
        se_r = run_se.reindex(r.index).to_numpy(dtype=float)
        se_f = np.interp(c, ref_se.index.to_numpy(dtype=float), ref_se.to_numpy(dtype=float),
                         left=np.nan, right=np.nan) if len(ref_se) else np.full(c.size, np.nan)
        logged = np.hypot(se_r, se_f)
    delta, mirror = r.to_numpy(dtype=float) - value, np.zeros(c.size, dtype=bool)
    if mirrored:
        delta, error, mirror, past_end = _mirrored(r, f, delta, error, exact)
        gap = np.diff(c, prepend=np.nan) > MAX_BRACKET_FACTOR * (np.median(np.diff(c)) if c.size > 1 else np.inf)
        value = np.where(past_end, fv[-1], value)
        keep |= past_end & ~gap
    out = pd.DataFrame({"step": r.index.to_numpy()[keep], "run": r.to_numpy(dtype=float)[keep],
                        "reference": value[keep], "delta": delta[keep], "interp_error": error[keep],
                        "exact": exact[keep], "logged_se": logged[keep], "mirrored": mirror[keep]})
    return out[list(PAIR_COLUMNS)].reset_index(drop=True)


def _mirrored(r: pd.Series, f: pd.Series, delta: np.ndarray, error: np.ndarray,
              exact: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(differences, their errors, which are mirrored, which lie past the reference's last
    evaluation) with each interpolated checkpoint whose bracket since the run's previous checkpoint
    holds a reference evaluation averaged with its mirror there (pair_series). The run is
    interpolated through its last three checkpoints up to this one (PCHIP, on ln step), which is
    what PCHIP through all of them gives on that bracket: a checkpoint's value never changes as
    later ones arrive.

    A checkpoint past the reference's last evaluation has no reference value of its own (nothing
    is extrapolated), but when that evaluation lies inside its bracket the mirror alone pairs it:
    the run interpolated there against the evaluation, with the interpolation error of the run's
    bracket (PAST_END_ERROR_SCALE). A run evaluated at its last step and a reference a little
    before its own is judged at the end that matters most."""
    c, rv = np.log(r.index.to_numpy(dtype=float)), r.to_numpy(dtype=float)
    rs, fv = np.log(f.index.to_numpy(dtype=float)), f.to_numpy(dtype=float)
    delta, error = delta.copy(), error.copy()
    mirror, past_end = np.zeros(c.size, dtype=bool), np.zeros(c.size, dtype=bool)
    before = np.searchsorted(rs, c) - 1  # the reference's last evaluation before each checkpoint
    for k in np.flatnonzero(~exact):
        if k == 0 or before[k] < 0 or rs[before[k]] <= c[k - 1]:
            continue
        lo = max(0, k - 2)
        run_there = PchipInterpolator(c[lo:k + 1], rv[lo:k + 1])(rs[before[k]])
        if before[k] == rs.size - 1 and c[k] > rs[-1]:
            w = (rs[-1] - c[k - 1]) / (c[k] - c[k - 1])
            delta[k] = run_there - fv[-1]
            error[k] = PAST_END_ERROR_SCALE * abs(rv[k] - rv[k - 1]) * w * (1 - w)
            past_end[k] = True
            continue
        delta[k] = 0.5 * (delta[k] + run_there - fv[before[k]])
        error[k] = error[k] * MIRROR_ERROR_SCALE / INTERP_ERROR_SCALE
        mirror[k] = True
    return delta, error, mirror, past_end


def measurement_error(pairs: pd.DataFrame) -> np.ndarray:
    """Standard error of each paired difference, estimated from the second differences of the paired
    differences up to it; before MIN_NOISE_POINTS of them, the logged one where both runs log one,
    else NaN (unknown).

    A logged standard error is each run's own error against all held-out text: two runs evaluated
    on the same text err together, so it overstates their difference's error (hypot of the two
    assumes they err independently), and it understates it where the eval is noisier than its
    tokens say (tokens of one document are not independent). The difference curve shows the error
    the two runs actually have from checkpoint to checkpoint; the lasting offset that one eval set
    gives one model is a persistent term beside the between-run one (eval_set_offset).

    The estimate reads exact pairs when there are enough of them, and the interpolation error adds
    in quadrature. Where most pairs are interpolated, their second differences carry the
    interpolation errors as well as the eval noise: each is read against its own share of them
    (its variance from independent errors, e0^2 + 4 e1^2 + e2^2; _eval_noise), and what they do
    not explain is the eval noise, to which the checkpoint's own interpolation error adds in
    quadrature. Counting the interpolation errors twice, once in the scatter and once on their
    own, would make a run paired only by interpolation unjudgeable early in training, where the
    curve bends most."""
    d = pairs["delta"].to_numpy(dtype=float)
    exact = pairs["exact"].to_numpy(dtype=bool)
    interp = pairs["interp_error"].to_numpy(dtype=float)
    logged = pairs["logged_se"].to_numpy(dtype=float)
    se = np.full(d.size, np.nan)
    for i in range(d.size):
        upto = np.arange(i + 1)
        exact_upto = upto[exact[: i + 1]]
        if exact_upto.size >= MIN_NOISE_POINTS:
            se[i] = np.hypot(_d2_sigma(d[exact_upto[-NOISE_WINDOW:]]), interp[i])
        elif i + 1 >= MIN_NOISE_POINTS:
            window = slice(max(0, i + 1 - NOISE_WINDOW), i + 1)
            se[i] = np.hypot(_eval_noise(d[window], interp[window]), interp[i])
        elif np.isfinite(logged[i]):
            se[i] = np.hypot(logged[i], interp[i])
    return se


def eval_set_offset(pairs: pd.DataFrame) -> np.ndarray:
    """The standard deviation of the lasting offset an eval set can give one of two models over the
    other, where both runs log a standard error (0 elsewhere): scored on the same text at every
    checkpoint, the two runs keep whatever edge that text gives one of them, and the logged error
    of their difference bounds it. The between-run term (noise.py), fitted on repeats scored on
    the same sets, already holds such an offset for sets of their size; detectors take this as its
    floor, so only an eval set small enough to err more than two seeds differ (a logged error of
    0.05 nats: a few thousand tokens) widens their bands."""
    return np.nan_to_num(pairs["logged_se"].to_numpy(dtype=float), nan=0.0)


def _eval_noise(values: np.ndarray, interp: np.ndarray) -> float:
    """Eval noise sigma of a smooth series whose points carry interpolation errors `interp`: each
    second difference has variance e0^2 + 4 e1^2 + e2^2 + 6 sigma^2, and sigma is where the median
    of the squared second differences over those variances is what it is for such noise
    (D2_MEDIAN_FACTOR). Judging each second difference against its own interpolation errors keeps a
    large early bracket from lending its error to the later ones; with no interpolation it is
    median(d2^2) / (6 x factor)."""
    d2 = values[2:] - 2 * values[1:-1] + values[:-2]
    v = interp[:-2] ** 2 + 4.0 * interp[1:-1] ** 2 + interp[2:] ** 2
    factor = D2_MEDIAN_FACTOR[d2.size - 1]
    widest = float(np.median(d2 ** 2)) / (6.0 * factor)
    if widest == 0.0:
        return 0.0

    def excess(var: float) -> float:
        total = v + 6.0 * var
        ratio = np.divide(d2 ** 2, total, out=np.where(d2 == 0, 0.0, np.inf), where=total > 0)
        return float(np.median(ratio)) - factor

    if excess(0.0) <= 0.0:
        return 0.0
    return float(np.sqrt(brentq(excess, 1e-12 * widest, widest, xtol=1e-9 * widest)))


def _d2_sigma(values: np.ndarray) -> float:
    """Noise of a smooth series of exact pairs from its second differences, var(d2) = 6 sigma^2, at
    the large-sample factor of the median: from two to six second differences it overstates sigma
    by 48% to 25% (D2_MEDIAN_FACTOR), which is the allowance a z-test on an estimate from so few
    differences needs. Unbiased, it fired on a genuine improvement with noisy evaluations
    (tests/monitor/detectors/test_memorization.py); beside an interpolation error, which the
    calibrated band already bounds, the estimate is only a remainder and is read unbiased."""
    d2 = values[2:] - 2 * values[1:-1] + values[:-2]
    return MAD_TO_SIGMA * float(np.median(np.abs(d2))) / np.sqrt(6.0)


def empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({"step": pd.Series(dtype="int64"), "run": pd.Series(dtype=float),
                         "reference": pd.Series(dtype=float), "delta": pd.Series(dtype=float),
                         "interp_error": pd.Series(dtype=float), "exact": pd.Series(dtype=bool),
                         "logged_se": pd.Series(dtype=float), "mirrored": pd.Series(dtype=bool)})


def heldout_pairs(run: RunData, reference: RunData, stat: str = "loss",
                  mirrored: bool = False) -> dict[str, pd.DataFrame]:
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
                            finite(reference, other["stderr"]) if se_ok else None, mirrored=mirrored)
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
                        "exact": g["exact"].all().to_numpy(), "logged_se": logged.to_numpy(dtype=float),
                        "mirrored": g["mirrored"].any().to_numpy()})
    out["sets"] = n.to_numpy()
    return out.reset_index(drop=True)
