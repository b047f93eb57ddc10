"""Fit the between-run noise constants of monitor/detectors/noise.py, and the few floors that are
not noise models, on the calibration half of the real pairs only.

Each noise model is fitted by maximum likelihood on each family of clean pairs separately (the
repeats of one modded-nanogpt config; the OLMo ladder run/rerun pairs), and the widest fit is kept,
coefficient by coefficient: one pooled fit would average a close family (the ladder reruns sit
0.02% of the loss apart) with a wide one (the repeats, 0.2%) and be too narrow for the wide one.

`python -m bench.quality.calibrate` prints the fitted values; the defaults in the code are these
numbers, and tests/bench/test_quality.py refits them and checks that the code still says so.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.detectors.checkpoints import heldout_pairs, over_sets, pair_series
from monitor.detectors.heldout_divergence import HeldoutDivergence
from monitor.detectors.memorization import Memorization
from monitor.detectors.memorization_trend import MemorizationTrend
from monitor.detectors.noise import BetweenRunNoise, fit_noise
from monitor.detectors.reference_divergence import ReferenceDivergence

from . import corpus, faults


@dataclass(frozen=True)
class Calibration:
    train: BetweenRunNoise
    heldout: BetweenRunNoise
    follow: BetweenRunNoise
    largest_single_set_share: float
    """Largest |run - reference| / loss of any one held-out set of a clean calibration pair."""
    largest_trend_residual: float
    """Largest residual of a clean single calibration run's held-out minus train gap from its trend."""
    interp_error_scale: float
    """Standard error of an interpolated held-out loss per unit of bracket fall x w (1 - w)."""
    interp_error_correlation: float
    """Correlation of the interpolation errors at consecutive interpolated checkpoints."""
    mirror_error_scale: float
    """The same standard error for a mirrored difference (checkpoints.pair_series)."""
    mirror_error_correlation: float
    """Correlation of the mirrored differences' errors at consecutive mirrored checkpoints."""
    past_end_error_scale: float
    """The same standard error for a checkpoint paired past the reference's last evaluation."""
    points: dict[str, int]


def unordered_clean_pairs(half: str = "calibration") -> dict[str, list]:
    """Each clean pair of a half once (the noise of b - a is that of a - b), by family."""
    return {"repeats": list(itertools.combinations(corpus.repeats(half), 2)),
            "ladder": [corpus.ladder(size) for size in corpus.LADDER_SIZES[half]]}


def train_points(pairs: list) -> pd.DataFrame:
    det = ReferenceDivergence()
    frames = [det.windows(a, b) for a, b in pairs if "train/loss" in a.scalars]
    if not frames:
        return pd.DataFrame()
    w = pd.concat(frames, ignore_index=True)
    return w[w["complete"].astype(bool)]


def heldout_points(pairs: list) -> pd.DataFrame:
    det = HeldoutDivergence()
    h = pd.concat([det.judged(over_sets(heldout_pairs(a, b))) for a, b in pairs], ignore_index=True)
    return h[np.isfinite(h["stderr"].to_numpy(dtype=float))]


def follow_points(pairs: list) -> pd.DataFrame:
    det = Memorization()
    frames = [det.table(a, b) for a, b in pairs if "train/loss" in a.scalars]
    if not frames:
        return pd.DataFrame()
    t = pd.concat(frames, ignore_index=True)
    t = t[t["judged"].astype(bool)].copy()
    t["stderr"] = np.sqrt(t["heldout_stderr"] ** 2 + (det.max_heldout_share * t["train_stderr"]) ** 2)
    return t


def heldout_curves(half: str):
    """The held-out loss of each of the half's repeats, its checkpoints after step 0."""
    for data in corpus.repeats(half):
        key = next(k for k in data.scalars.columns if k.startswith("eval/heldout/") and k.endswith("/loss"))
        full = data.series(key)
        yield full[full.index > 0]


def interpolated_evaluations(half: str) -> list[np.ndarray]:
    """(interpolated - evaluated) / (|f(r1) - f(r0)| w (1 - w)), in step order, for the held-out
    evaluations of the half's repeats that thinning the evaluations 2x, 3x and 4x (every phase)
    leaves out, rebuilt by checkpoints.pair_series from the ones kept: one array per thinning."""
    out = []
    for full in heldout_curves(half):
        for every in (2, 3, 4):
            for phase in range(every):
                kept = full.iloc[phase::every]
                pairs = pair_series(full, kept)
                pairs = pairs[~pairs["exact"].astype(bool)]
                steps = pairs["step"].to_numpy()
                truth = full.loc[steps].to_numpy()
                x, xs = np.log(steps.astype(float)), np.log(kept.index.to_numpy(dtype=float))
                pos = np.searchsorted(xs, x)
                w = (x - xs[pos - 1]) / (xs[pos] - xs[pos - 1])
                scale = np.abs(kept.to_numpy()[pos] - kept.to_numpy()[pos - 1]) * w * (1 - w)
                out.append((pairs["reference"].to_numpy() - truth) / np.maximum(scale, 1e-12))
    return out


def self_paired(half: str):
    """(run, reference, their mirrored pairs) of each of the half's repeats paired with itself, its
    held-out evaluations kept every 2nd, 3rd and 4th for the run and at another phase for the
    reference: the true difference is zero, so each paired difference is the error of its estimate."""
    for full in heldout_curves(half):
        for every in (2, 3, 4):
            for ours, theirs in itertools.permutations(range(every), 2):
                run, ref = full.iloc[ours::every], full.iloc[theirs::every]
                yield run, ref, pair_series(run, ref, mirrored=True)


def mirrored_evaluations(half: str) -> list[np.ndarray]:
    """Mirrored differences (checkpoints.pair_series, mirrored) / (|f(r1) - f(r0)| w (1 - w)), in
    step order, of the self-paired repeats (self_paired). One array per thinning."""
    out = []
    for _, ref, mirrored in self_paired(half):
        changed = mirrored["mirrored"].to_numpy()
        if not changed.any():
            continue
        x = np.log(mirrored["step"].to_numpy(dtype=float)[changed])
        xs, fv = np.log(ref.index.to_numpy(dtype=float)), ref.to_numpy()
        pos = np.searchsorted(xs, x)
        w = (x - xs[pos - 1]) / (xs[pos] - xs[pos - 1])
        scale = np.abs(fv[pos] - fv[pos - 1]) * w * (1 - w)
        out.append(mirrored["delta"].to_numpy()[changed] / np.maximum(scale, 1e-12))
    return out


def past_end_evaluations(half: str) -> np.ndarray:
    """Differences paired past the reference's last evaluation (checkpoints.pair_series, mirrored:
    the run interpolated back to that evaluation) / (|r(c1) - r(c0)| w (1 - w)) over the run's
    bracket (c0, c1), of the self-paired repeats (self_paired)."""
    out = []
    for run, ref, pairs in self_paired(half):
        for step, delta in zip(pairs["step"], pairs["delta"]):
            if step <= ref.index[-1]:
                continue
            k = run.index.get_loc(step)
            x0, x1, x = np.log([run.index[k - 1], step, ref.index[-1]])
            w = (x - x0) / (x1 - x0)
            out.append(delta / max(abs(run.iloc[k] - run.iloc[k - 1]) * w * (1 - w), 1e-12))
    return np.asarray(out, dtype=float)


def interpolation_errors(half: str) -> np.ndarray:
    """|interpolated - evaluated| per unit of the error scale, every left-out evaluation."""
    return np.abs(np.concatenate(interpolated_evaluations(half)))


def interpolation_error_correlation(half: str, errors=interpolated_evaluations) -> float:
    """Correlation of the errors (in units of their scale) at consecutive interpolated evaluations
    (`errors`: interpolated_evaluations or mirrored_evaluations)."""
    pairs = np.concatenate([np.column_stack([e[:-1], e[1:]]) for e in errors(half) if e.size > 1])
    return float(np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1])


def sparse_logging_alarms(half: str, floors=(2, 4, 8, 16), every=(10, 25)) -> dict[tuple[int, int], int]:
    """Clean repeat pairs (both ways) on which reference_divergence fires when train loss is logged
    every k steps as the mean since the last log, by (k, min_window_points): what the floor on a
    window's values would have to prevent."""

    pairs = list(itertools.permutations(corpus.repeats(half), 2))
    fired = {}
    for k in every:
        logged = [(faults.train_every(a, k), faults.train_every(b, k)) for a, b in pairs]
        for floor in floors:
            det = ReferenceDivergence(min_window_points=floor)
            fired[(k, floor)] = sum(bool(det.detect(a, b)) for a, b in logged)
    return fired


def widest(fits: list[BetweenRunNoise]) -> BetweenRunNoise:
    return BetweenRunNoise(level=max(f.level for f in fits), timing=max(f.timing for f in fits))


def calibrate(half: str = "calibration") -> Calibration:
    families = unordered_clean_pairs(half)
    fits: dict[str, list[BetweenRunNoise]] = {"train": [], "heldout": [], "follow": []}
    points = {"train windows": 0, "held-out checkpoints": 0, "follow checkpoints": 0}
    for pairs in families.values():
        tr, ho, fo = train_points(pairs), heldout_points(pairs), follow_points(pairs)
        if len(tr):
            fits["train"].append(fit_noise(tr["delta"], tr["stderr"], tr["level"], tr["slope"]))
        fits["heldout"].append(fit_noise(ho["delta"], ho["stderr"], ho["level"], ho["slope"]))
        if len(fo):
            fits["follow"].append(fit_noise(fo["follow"], fo["stderr"], fo["heldout_level"], fo["heldout_slope"]))
        points["train windows"] += len(tr)
        points["held-out checkpoints"] += len(ho)
        points["follow checkpoints"] += len(fo)
    share = 0.0
    for a, b in (pair for pairs in families.values() for pair in pairs):
        for pairs in heldout_pairs(a, b).values():
            share = max(share, float((pairs["delta"].abs() / pairs["reference"].abs()).max()))
    trend = MemorizationTrend()
    resid_max = 0.0
    for data in corpus.single_runs(half):
        resid, _ = trend.residuals(data, trend.table(data))
        if np.isfinite(resid).any():
            resid_max = max(resid_max, float(np.nanmax(resid)))
    # A 95% band of the actual errors, as a standard error (divided by 1.96).
    interp = float(np.percentile(interpolation_errors(half), 95) / 1.96)
    mirror = float(np.percentile(np.abs(np.concatenate(mirrored_evaluations(half))), 95) / 1.96)
    past_end = float(np.percentile(np.abs(past_end_evaluations(half)), 95) / 1.96)
    return Calibration(train=widest(fits["train"]), heldout=widest(fits["heldout"]), follow=widest(fits["follow"]),
                       largest_single_set_share=share, largest_trend_residual=resid_max, interp_error_scale=interp,
                       interp_error_correlation=interpolation_error_correlation(half),
                       mirror_error_scale=mirror,
                       mirror_error_correlation=interpolation_error_correlation(half, mirrored_evaluations),
                       past_end_error_scale=past_end, points=points)


def main(argv: list[str] | None = None) -> int:
    c = calibrate()
    for name in ("train", "heldout", "follow"):
        noise = getattr(c, name)
        print(f"{name:8s} level={noise.level:.5f} timing={noise.timing:.5f}")
    test_errors = interpolation_errors("test")
    print(f"largest single-set share {c.largest_single_set_share:.4f}; largest trend residual "
          f"{c.largest_trend_residual:.4f}; interpolation error scale {c.interp_error_scale:.3f} (covers "
          f"{np.mean(test_errors <= 1.96 * c.interp_error_scale):.1%} of the test half's errors at 1.96), "
          f"correlated {c.interp_error_correlation:.2f} at consecutive checkpoints "
          f"({interpolation_error_correlation('test'):.2f} on the test half); "
          f"mirrored: scale {c.mirror_error_scale:.3f} (covers "
          f"{np.mean(np.abs(np.concatenate(mirrored_evaluations('test'))) <= 1.96 * c.mirror_error_scale):.1%} "
          f"of the test half's), correlated {c.mirror_error_correlation:.2f} "
          f"({interpolation_error_correlation('test', mirrored_evaluations):.2f} on the test half); "
          f"past the reference's last evaluation: scale {c.past_end_error_scale:.3f} (covers "
          f"{np.mean(np.abs(past_end_evaluations('test')) <= 1.96 * c.past_end_error_scale):.1%} of the test "
          f"half's, {past_end_evaluations('calibration').size} calibration and "
          f"{past_end_evaluations('test').size} test checkpoints); points {c.points}")
    alarms = sparse_logging_alarms("calibration")
    print("clean pairs on which reference_divergence fired, train loss logged every k steps as a mean, by "
          "(k, min_window_points): " + ", ".join(f"{key}: {n}" for key, n in alarms.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
