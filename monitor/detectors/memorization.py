"""Memorization against the reference: train loss falls below the reference while held-out loss
does not follow.

A data loader that repeats data (double sharding that resamples the corpus, a wrong epoch
boundary) lowers the train loss, because the model has seen those records before, but not the
held-out loss, and downstream evals do not improve. A genuinely better run lowers both. Judged at
every checkpoint of the run that can be paired with the reference's held-out evaluations
(monitor/detectors/checkpoints.py: exact, or interpolated with its error, at any cadence;
mirrored where the reference evaluated inside the run's last bracket), with
the between-run noise of monitor/detectors/noise.py in every leg:

1. train below: the median of run - reference train loss over the window ending at the checkpoint
   (train_windows.train_at) is below the reference by more than `z_threshold` standard deviations
   of its noise (the window's own error and the spread of two runs of one recipe);
2. held-out not better: an equivalence test on the held-out difference (the median over sets).
   The margin is the larger of what two seeds of one recipe differ by (`tie_sigmas` between-run
   standard deviations of held-out loss) and `max_heldout_share` of the train gap (a held-out
   change smaller than that did not follow the train change). The lower end of the difference's
   1 - 2 x `tie_alpha` interval must lie above -margin: the run did not generalise better. When the
   upper end also lies below the margin, held-out loss is tied (the two one-sided tests of TOST);
   when it lies above zero by more than two seeds differ (its interval, widened by the between-run
   spread, lies above zero), it is worse, which overfitting to repeated data can also do. The
   held-out standard error is estimated from the difference curve (checkpoints.py), never taken
   as zero; an eval set whose logged standard error exceeds two seeds' spread widens the interval
   by the excess (checkpoints.eval_set_offset);
3. held-out did not follow: held-out minus `max_heldout_share` x train difference is above zero by
   more than `z_threshold` standard deviations of its noise (a genuine improvement moves held-out
   by most of the train gain; the OLMo 3 7B reproduction moved it by 2%). It is tested on the mean
   over the `persist_checkpoints` judged checkpoints that end at this one, each weighted by the
   inverse of its measurement error's variance: the between-run part of
   its noise is one persistent offset, the same at each of them, while their measurement errors
   (eval noise, interpolation) partly average out (checkpoints.INTERP_ERROR_CORRELATION, or
   MIRROR_ERROR_CORRELATION where they are all mirrored);
4. downstream not better: where both runs have downstream evals at the checkpoint, their
   aggregate z is not above `z_threshold`.

`persist_checkpoints` consecutive judged checkpoints (checkpoints where every leg could be
computed; one that could not is skipped, not counted as clean), each with legs 1, 2 and 4 and with
leg 3 over them, make a detection.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import stats as sps

from monitor.schema import (
    DATA_SEEN_2PLUS_FRACTION,
    DOWNSTREAM_PREFIX,
    HELDOUT_PREFIX,
    TRAIN_LOSS,
    Clean,
    CleanRule,
    NotJudged,
    RunData,
    Section,
    Story,
    VerdictRole,
)

from .base import CLEAN_Z, MEMORIZATION_VERDICT, Detector, Reads, ReferenceUse, severity_for
from .incremental import Incremental
from .checkpoints import (
    HISTORY_CHECKPOINTS,
    INTERP_ERROR_CORRELATION,
    MIN_NOISE_POINTS,
    MIRROR_ERROR_CORRELATION,
    eval_set_offset,
    heldout_pairs,
    measurement_error,
    over_sets,
)
from .eval_keys import downstream_aggregate, unshared_heldout
from .noise import FOLLOW_NOISE, HELDOUT_NOISE, TRAIN_NOISE, BetweenRunNoise, log_slope
from .overlap import overlap
from .rundata import finite, last_points_from
from .stats import true_runs
from .train_windows import too_few_between, train_at

UNDECIDED = "undecided"
"""How a "not judged" line of this detector starts when its evidence neither shows memorization nor
rules it out (the follow test falls short at the last judged checkpoint)."""
SUSPECT = ("the signature of repeated training data (data-loader sharding that resamples the "
           "corpus, a wrong epoch boundary)")
TABLE_COLUMNS = ("step", "train_delta", "train_stderr", "train_tau", "train_z", "heldout_delta", "heldout_stderr",
                 "heldout_level", "heldout_slope", "heldout_tau", "margin", "heldout_low", "heldout_high", "follow", "follow_z",
                 "follow_pooled", "follow_pooled_z", "downstream_z",
                 "sets", "interpolated", "judged", "below", "not_better", "tied", "worse", "not_followed", "downstream_ok")


@dataclass
class Memorization(Detector, Incremental):
    name: ClassVar[str] = "memorization"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.REQUIRED
    story: ClassVar[Story] = Story.MEMORIZATION
    specificity: ClassVar[int] = 3
    explanation: ClassVar[str] = "memorization: train loss below the reference while held-out loss is tied"
    judges: ClassVar[str] = "memorization against the reference"
    clean_rule: ClassVar[CleanRule] = CleanRule.CLEAN_VERDICTS
    shown_in: ClassVar[tuple[Section, ...]] = (Section.TRAIN, Section.HELDOUT)
    verdict: ClassVar[VerdictRole | None] = MEMORIZATION_VERDICT
    reads: ClassVar[Reads] = Reads(columns=(DATA_SEEN_2PLUS_FRACTION,), prefixes=(HELDOUT_PREFIX, DOWNSTREAM_PREFIX),
                                   fields=("metric",))
    counts_from_zero: ClassVar[tuple[str, ...]] = ("max_eval_lateness_points",)

    metric: str = TRAIN_LOSS
    """The train metric compared with the reference."""
    window_points: int = 100
    """Logged steps of train loss summarised at each checkpoint, at most."""
    window_checkpoints: int = 2
    """The train window reaches back at most this many intervals between checkpoints, so that it
    describes the stretch of training the held-out loss was evaluated after."""
    train_noise_level: float = TRAIN_NOISE.level
    """Between-run spread of train loss, a share of its level: fitted on the calibration half."""
    train_noise_timing: float = TRAIN_NOISE.timing
    """Between-run step shift of train loss, a fraction of ln(step): fitted on the calibration half."""
    heldout_noise_level: float = HELDOUT_NOISE.level
    """Between-run spread of held-out loss, a share of its level: fitted on the calibration half."""
    heldout_noise_timing: float = HELDOUT_NOISE.timing
    """Between-run step shift of held-out loss: fitted on the calibration half."""
    follow_noise_level: float = FOLLOW_NOISE.level
    """Between-run spread of held-out minus max_heldout_share x train difference: fitted on the
    calibration half (train and held-out offsets of two seeds move together, correlation 0.94 on
    the repeats, so this spread is half that of either)."""
    follow_noise_timing: float = FOLLOW_NOISE.timing
    """Between-run step shift of the follow statistic: fitted on the calibration half."""
    z_threshold: float = 3.0
    """Standard deviations of its noise that the train gap and the follow statistic must exceed."""
    tie_sigmas: float = 3.0
    """The equivalence margin for held-out loss is at least this many between-run standard
    deviations: held-out within 3 of them of the reference is what two seeds of one recipe do 99.7%
    of the time."""
    tie_alpha: float = 0.05
    """Each one-sided test of the equivalence test at 5%: the 90% interval must lie in the margin."""
    max_heldout_share: float = 0.5
    """In the OLMo 3 7B reproduction, train loss fell 0.25 below the reference and held-out C4
    moved by 0.004: a share of 0.02. A genuine improvement moves held-out by most of the train
    gain; half is the boundary."""
    persist_checkpoints: int = 2
    """Consecutive judged checkpoints that make a detection."""
    critical_ratio: float = 3.0
    """A train gap three times the threshold it had to clear is CRITICAL."""
    max_eval_lateness_points: int = 50_000
    """The watch service keeps this many logged steps of train loss for held-out evaluations that
    arrive late (an offline eval job): 50,000 steps is days of a large run."""

    def history_points(self, column: str) -> int | None:
        if column == self.metric:
            return None  # see keep_from
        return HISTORY_CHECKPOINTS + self.persist_checkpoints

    def keep_from(self, run: RunData) -> dict[str, float]:
        """Eval columns keep their last checkpoints; train loss keeps the windows of the last
        checkpoints (a run of flagged ones may reach back over them) and everything logged since,
        for the evaluations still to come, which an offline eval job may deliver late; at most
        `max_eval_lateness_points` of it."""
        keep = super().keep_from(run)
        held = _checkpoints(run)
        anchor = float(held[-(self.persist_checkpoints + 2)]) if held.size > self.persist_checkpoints + 1 else -np.inf
        train = finite(run, self.metric)
        before = train.index[train.index <= anchor]
        window_start = float(before[-self.window_points]) if len(before) >= self.window_points else -np.inf
        keep[self.metric] = max(window_start, last_points_from(run, self.metric, self.max_eval_lateness_points))
        return keep

    def noises(self) -> tuple[BetweenRunNoise, BetweenRunNoise, BetweenRunNoise]:
        return (BetweenRunNoise(self.train_noise_level, self.train_noise_timing),
                BetweenRunNoise(self.heldout_noise_level, self.heldout_noise_timing),
                BetweenRunNoise(self.follow_noise_level, self.follow_noise_timing))

    # --- the checkpoint table ------------------------------------------------------------------
    def table(self, run: RunData, reference: RunData) -> pd.DataFrame:
        """One row per run checkpoint paired with the reference's held-out loss: every leg's
        numbers and verdict (module docstring)."""
        held = over_sets(heldout_pairs(run, reference, mirrored=True))
        if held.empty:
            return pd.DataFrame({c: pd.Series(dtype=float) for c in TABLE_COLUMNS})
        train_noise, held_noise, follow_noise = self.noises()
        steps = held["step"].to_numpy()
        t = train_at(run, self.metric, steps, self.window_points, self.window_checkpoints, other=reference)
        dt, se_t, level_t = (t[c].to_numpy(dtype=float) for c in ("train", "train_se", "level"))
        slope_t = _slope(steps, level_t)
        dh = held["delta"].to_numpy(dtype=float)
        se_h = measurement_error(held)
        level_h = held["reference"].abs().to_numpy(dtype=float)
        slope_h = _slope(steps, held["reference"].to_numpy(dtype=float))
        tau_t = train_noise.tau(level_t, slope_t)
        # Two seeds' spread sets the tie margin; an eval set that errs more than they differ
        # (checkpoints.eval_set_offset) widens the held-out interval by the excess, not the margin.
        # The follow test needs no such term: a held-out gain such a set hides never passes the tie
        # test, which every checkpoint of a detection must.
        seeds_h = held_noise.tau(level_h, slope_h)
        floor = eval_set_offset(held)
        tau_h = np.fmax(seeds_h, floor)
        share = self.max_heldout_share
        follow = dh - share * dt
        tau_f = follow_noise.tau(level_h, slope_h)
        z_tost = sps.norm.isf(self.tie_alpha)
        margin = np.fmax(self.tie_sigmas * seeds_h, share * np.abs(dt))
        tie_se = np.hypot(se_h, np.sqrt(np.fmax(floor ** 2 - seeds_h ** 2, 0.0)))
        low, high = dh - z_tost * tie_se, dh + z_tost * tie_se
        # A persistent offset between two seeds is no sign of overfitting: "worse" must clear it too.
        worse = dh - z_tost * np.hypot(se_h, tau_h) > 0
        follow_se = np.hypot(se_h, share * se_t)
        with np.errstate(invalid="ignore", divide="ignore"):
            train_z = dt / np.hypot(se_t, tau_t)
            follow_z = follow / np.hypot(follow_se, tau_f)
        down_z = self._downstream_z(run, reference, steps)
        judged = np.isfinite(train_z) & np.isfinite(follow_z) & np.isfinite(low)
        mirrored = held["mirrored"].to_numpy(dtype=bool)
        one_sided = ~held["exact"].to_numpy(dtype=bool) & ~mirrored
        pooled, pooled_z = _pooled(follow, follow_se, tau_f, judged, mirrored, one_sided, self.persist_checkpoints)
        with np.errstate(invalid="ignore"):
            table = pd.DataFrame({
                "step": steps, "train_delta": dt, "train_stderr": se_t, "train_tau": tau_t, "train_z": train_z,
                "heldout_delta": dh, "heldout_stderr": tie_se, "heldout_level": level_h, "heldout_slope": slope_h,
                "heldout_tau": tau_h, "margin": margin,
                "heldout_low": low, "heldout_high": high, "follow": follow, "follow_z": follow_z,
                "follow_pooled": pooled, "follow_pooled_z": pooled_z, "downstream_z": down_z, "sets": held["sets"].to_numpy(),
                "interpolated": ~held["exact"].to_numpy(dtype=bool), "judged": judged,
                "below": train_z < -self.z_threshold, "not_better": low > -margin,
                "tied": (low > -margin) & (high < margin), "worse": worse,
                "not_followed": pooled_z > self.z_threshold, "downstream_ok": ~(down_z > self.z_threshold),
            })
        return table

    def _downstream_z(self, run: RunData, reference: RunData, steps: np.ndarray) -> np.ndarray:
        if not _shares_downstream(run, reference):
            return np.full(len(steps), np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            down = downstream_aggregate(run, reference, steps)
        return down.set_index("step")["z"].reindex(steps).to_numpy(dtype=float)

    # --- judging -------------------------------------------------------------------------------
    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        if reference is None:
            return []
        table = self.table(run, reference)
        table = table[table["judged"].astype(bool)].reset_index(drop=True)
        if len(table) < self.persist_checkpoints:
            return []
        k = self.persist_checkpoints
        legs = (table["below"] & table["not_better"] & table["downstream_ok"]).to_numpy(bool)
        # A checkpoint is flagged when the pooled follow test that ends at it holds and the other
        # legs hold at every checkpoint it pools; a run of flagged ones spans their pools.
        held_over_pool = np.convolve(legs.astype(int), np.ones(k, dtype=int))[:len(legs)] == k
        flag = held_over_pool & table["not_followed"].to_numpy(bool)
        return [self._one(run, reference, table, a - k + 1, b, known=a) for a, b in true_runs(flag)]

    def clean(self, run: RunData, reference: RunData | None = None) -> list[Clean]:
        """Judged checkpoints at which the train difference, with its 90% interval, lies inside
        the between-run band a train gap must clear: nothing left for held-out loss to follow."""
        if reference is None:
            return []
        table = self.table(run, reference)
        table = table[table["judged"].astype(bool)]
        d, se, tau = (table[c].to_numpy(dtype=float) for c in ("train_delta", "train_stderr", "train_tau"))
        band = self.z_threshold * np.hypot(se, tau)
        tied = np.abs(d) + CLEAN_Z * se <= band
        return [self._clean(run, self.metric, step, step, {"train_delta": float(x), "train_stderr": float(e),
                                                          "band": float(b)}, alike_to=reference)
                for step, x, e, b, ok in zip(table["step"], d, se, band, tied) if ok]

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        if reference is None:
            return []
        if finite(run, self.metric).empty or finite(reference, self.metric).empty:
            # Aligned, a metric the runs logged at no common step leaves the reference's frame:
            # that is not a reference without it.
            shared = overlap(run, reference, self.metric)
            if shared is not None:
                return [NotJudged(self.name, shared.no_common_step(), self.metric)]
            who = "the run" if finite(run, self.metric).empty else "the reference"
            return [NotJudged(self.name, f"{who} logs no {self.metric}", self.metric)]
        unshared = unshared_heldout(run, reference)
        if unshared:
            return [NotJudged(self.name, unshared, self.metric)]
        for who, data in (("the run", run), ("the reference", reference)):
            if not any(c.startswith(HELDOUT_PREFIX) and c.endswith("/loss") for c in data.scalars.columns):
                return [NotJudged(self.name, f"{who} logs no held-out loss, so a lower train loss cannot be told "
                                  f"from a better model", self.metric)]
        table = self.table(run, reference)
        judged = int(table["judged"].sum()) if len(table) else 0
        if len(table) == 0:
            return [NotJudged(self.name, "no checkpoint of the run can be paired with the reference's held-out "
                              "evaluations (none around the run's)", self.metric)]
        if len(table) > 1 and table["train_delta"].iloc[1:].isna().all():
            return [NotJudged(self.name, too_few_between(self.window_checkpoints), self.metric)]
        if judged < self.persist_checkpoints:
            return [NotJudged(self.name, f"{judged} judged checkpoint(s) of {len(table)} paired; a verdict needs "
                              f"{self.persist_checkpoints} (the held-out noise is known from the {MIN_NOISE_POINTS}th paired one on)", self.metric,
                              f"{self.persist_checkpoints - judged} more judged checkpoints")]
        return self._undecided(table)

    def _undecided(self, table: pd.DataFrame) -> list[NotJudged]:
        """The last judged checkpoint shows train loss below the reference and held-out loss not
        better, but the follow test falls short (so no detection reaches it: one ends on a checkpoint
        whose follow test held): the evidence neither shows memorization nor rules it out, which the
        person told "train loss below the reference" must hear from this detector, not silence."""
        last = table[table["judged"].astype(bool)].iloc[-1]
        if not (last["below"] and last["not_better"] and last["downstream_ok"]) or last["not_followed"]:
            return []
        z = last["follow_pooled_z"]
        short = (f"by {z:.1f} standard deviations of its noise" if np.isfinite(z)
                 else "by an amount not yet pooled over two checkpoints")
        return [NotJudged(
            self.name,
            f"{UNDECIDED} at step {int(last['step']):,}: train loss is {abs(last['train_delta']):.3f} below the "
            f"reference and held-out loss is not better ({last['heldout_delta']:+.3f} ± {last['heldout_stderr']:.3f}), "
            f"but held-out loss failed to follow the train gap {short}, short of the {self.z_threshold:g} that "
            f"memorization needs", self.metric, "more held-out evaluations")]

    def _one(self, run: RunData, reference: RunData, table: pd.DataFrame, a: int, b: int, known: int):
        sl = table.iloc[a:b + 1]
        band = self.z_threshold * np.hypot(sl["train_stderr"], sl["train_tau"]).to_numpy()
        ratio = -sl["train_delta"].to_numpy() / band
        k = a + int(np.argmax(ratio))
        row = table.iloc[k]
        evidence = {
            "train_delta": float(row["train_delta"]), "train_delta_median": float(np.median(sl["train_delta"])),
            "train_stderr": float(row["train_stderr"]), "train_tau": float(row["train_tau"]),
            "band": float(band[k - a]), "train_z": float(row["train_z"]),
            "heldout_delta": float(row["heldout_delta"]), "heldout_stderr": float(row["heldout_stderr"]),
            "heldout_interval": [float(row["heldout_low"]), float(row["heldout_high"])],
            "margin": float(row["margin"]), "heldout": _heldout_verdict(row),
            "follow": float(row["follow"]), "follow_z": float(row["follow_z"]),
            "follow_pooled": float(row["follow_pooled"]), "follow_pooled_z": float(row["follow_pooled_z"]),
            "delta": float(row["follow"]), "z": float(row["follow_z"]),
            "downstream_z": float(row["downstream_z"]), "heldout_sets": int(row["sets"]),
            "interpolated": int(sl["interpolated"].sum()), "n": int(b - a + 1),
        }
        repeated = finite(run, DATA_SEEN_2PLUS_FRACTION)
        extra = ""
        if len(repeated) and repeated.index[0] <= row["step"]:
            share = float(repeated.loc[:row["step"]].iloc[-1])
            evidence["seen_2plus_fraction"] = share
            extra = f"; {share:.0%} of the corpus has been seen twice or more"
        held = _heldout_verdict(row)
        # Downstream evals are often sparser than held-out ones: say where they were compared.
        compared = int(np.isfinite(sl["downstream_z"].to_numpy(dtype=float)).sum())
        evidence["downstream_compared"] = compared
        down = (f"downstream evals are not better at the {compared} of its {b - a + 1} checkpoints that have them"
                if compared else "no downstream eval at these checkpoints" if _shares_downstream(run, reference)
                else "no downstream evals to compare")
        message = (f"train loss {abs(evidence['train_delta_median']):.3f} below the reference (had to clear "
                   f"{np.median(band):.3f}) while held-out loss is {held} ({row['heldout_delta']:+.3f}, 90% interval "
                   f"{row['heldout_low']:+.3f} to {row['heldout_high']:+.3f}, margin ±{row['margin']:.3f}) and did not "
                   f"follow; {down}: {SUSPECT}{extra}")
        score = float(ratio.max())
        return self._detection(run, reference, self.metric, sl["step"].iloc[0], sl["step"].iloc[-1], row["step"],
                               score, severity_for(score, self.critical_ratio), message, evidence,
                               known=table["step"].iloc[known])


def _shares_downstream(run: RunData, reference: RunData) -> bool:
    return any(c.startswith(DOWNSTREAM_PREFIX) and c in reference.scalars.columns for c in run.scalars.columns)


def _heldout_verdict(row) -> str:
    """What held-out loss did: worse (above zero by more than two seeds differ), tied (inside the
    margin), or only not better."""
    if row["worse"]:
        return "worse"
    return "tied" if row["tied"] else "not better"


def _checkpoints(run: RunData) -> np.ndarray:
    """Steps at which the run logged a held-out loss."""
    keys = [c for c in run.scalars.columns if c.startswith(HELDOUT_PREFIX) and c.endswith("/loss")]
    if not keys:
        return np.array([], dtype=np.int64)
    logged = np.isfinite(run.scalars[keys].to_numpy(dtype=float)).any(axis=1)
    return run.scalars.index.to_numpy()[logged]


def _pooled(follow: np.ndarray, se: np.ndarray, tau: np.ndarray, judged: np.ndarray, mirrored: np.ndarray,
            one_sided: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The follow statistic's mean over the last k judged checkpoints up to each judged one, each
    weighted by the inverse of its measurement error's variance (a checkpoint paired with the
    reference interpolated counts for less than an exact one), and its z: the between-run offset
    is the same at each (its standard deviation averages to the mean of theirs), the measurement
    errors correlate by MIRROR_ERROR_CORRELATION where the pool's interpolated checkpoints are all
    mirrored (checkpoints.pair_series), else by INTERP_ERROR_CORRELATION."""
    mean, z = np.full(follow.size, np.nan), np.full(follow.size, np.nan)
    rows = np.flatnonzero(judged)
    for i in range(k - 1, rows.size):
        pool = rows[i - k + 1:i + 1]
        all_mirrored = mirrored[pool].any() and not one_sided[pool].any()
        rho = MIRROR_ERROR_CORRELATION if all_mirrored else INTERP_ERROR_CORRELATION
        s = se[pool]
        none = s == 0  # errors measured as nil: the limit of inverse-variance weights
        w = none / none.sum() if none.any() else s ** -2.0 / np.sum(s ** -2.0)
        var = (1 - rho) * np.sum((w * s) ** 2) + rho * np.sum(w * s) ** 2 + np.mean(tau[pool]) ** 2
        mean[pool[-1]] = float(np.sum(w * follow[pool]))
        z[pool[-1]] = mean[pool[-1]] / np.sqrt(var)
    return mean, z


def _slope(steps: np.ndarray, level: np.ndarray) -> np.ndarray:
    """|d level / d ln step| at each checkpoint, from the finite levels around it."""
    ok = np.isfinite(level)
    if ok.sum() < 2:
        return np.zeros(len(steps))
    return log_slope(np.asarray(steps, dtype=float)[ok], level[ok], np.asarray(steps, dtype=float))
