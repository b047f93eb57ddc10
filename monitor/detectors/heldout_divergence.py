"""Held-out divergence: held-out loss against the reference at the run's checkpoints, over all sets
together and per set, with the noise that separates two runs of one recipe.

At every checkpoint of the run, each set's difference run - reference is paired as
monitor/detectors/checkpoints.py pairs it (the reference's own evaluation there, or an
interpolation between its bracketing ones with its error), whatever the two cadences.

* Over all sets: the median of the differences across sets (a model that generalises differently
  moves every set; one odd set cannot move a median) gets a z against its measurement error
  (estimated from the difference curve itself, logged standard errors standing in before it can
  be, plus any interpolation error) and the between-run term of monitor/detectors/noise.py (two
  seeds of one recipe sit ~0.2% of the loss apart on held-out data too, however small an eval
  set's standard error; a set whose logged error is larger than that widens the term to it:
  checkpoints.eval_set_offset). |z| above `z_threshold` at `persist_checkpoints` consecutive
  judged checkpoints of one sign is a detection.
* Per set (when there are several): a set alone must also move by `min_relative_effect` of its
  loss, since single small sets wander between two runs of one recipe far more than the model
  level does.

Bits per byte stands in for sets that log no loss; the between-run term is relative to the level,
so the same noise model holds in either unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import stats as sps

from monitor.schema import (
    HELDOUT_PREFIX,
    Clean,
    CleanRule,
    Drawing,
    NotJudged,
    RunData,
    Section,
    Story,
    VerdictRole,
)

from .base import CLEAN_Z, Detector, Reads, ReferenceUse, severity_for
from .incremental import Incremental
from .checkpoints import (
    HISTORY_CHECKPOINTS,
    MIN_NOISE_POINTS,
    eval_set_offset,
    heldout_pairs,
    measurement_error,
    over_sets,
)
from .eval_keys import heldout_sets, unshared_heldout
from .noise import HELDOUT_NOISE, BetweenRunNoise, log_slope
from .overlap import overlap
from .stats import signed_runs

ALL_SETS = HELDOUT_PREFIX + "all"


@dataclass
class HeldoutDivergence(Detector, Incremental):
    name: ClassVar[str] = "heldout_divergence"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.REQUIRED
    story: ClassVar[Story] = Story.DIVERGENCE
    specificity: ClassVar[int] = 2
    explanation: ClassVar[str] = "held-out loss diverged from the reference"
    judges: ClassVar[str] = "held-out loss against the reference"
    clean_rule: ClassVar[CleanRule] = CleanRule.CLEAN_VERDICTS
    shown_in: ClassVar[tuple[Section, ...]] = (Section.HELDOUT,)
    draws: ClassVar[tuple[Drawing, ...]] = (Drawing.HELDOUT_BAND,)
    verdict: ClassVar[VerdictRole] = VerdictRole(60, "heldout_diverged", "Held-out loss diverged")
    reads: ClassVar[Reads] = Reads(prefixes=(HELDOUT_PREFIX,))

    noise_level: float = HELDOUT_NOISE.level
    """Between-run spread of held-out loss as a share of its level: fitted on the calibration
    half (noise.py)."""
    noise_timing: float = HELDOUT_NOISE.timing
    """Between-run step shift as a fraction of ln(step): fitted on the calibration half."""
    z_threshold: float = 3.0
    """Three standard deviations of the measurement and between-run noise together."""
    persist_checkpoints: int = 2
    """Consecutive judged checkpoints of one sign that make a detection: one odd eval is not enough."""
    min_relative_effect: float = 0.052
    """One set alone must move by 5.2% of its loss: 1.5 x the largest single-set gap of a clean pair
    on the calibration half (3.4%, the ICE set of the OLMo 190M ladder pair, while the median over
    its 11 sets stays within 0.3%)."""
    critical_ratio: float = 3.0
    """An effect three times the threshold it had to clear is CRITICAL."""

    @property
    def noise(self) -> BetweenRunNoise:
        return BetweenRunNoise(self.noise_level, self.noise_timing)

    def history_points(self, column: str) -> int:
        return HISTORY_CHECKPOINTS + self.persist_checkpoints

    # --- the checkpoints -----------------------------------------------------------------------
    def stat(self, run: RunData, reference: RunData) -> str | None:
        """The statistic compared: loss where both runs log it for a set, else bits per byte."""
        for stat in ("loss", "bpb"):
            if heldout_pairs(run, reference, stat):
                return stat
        return None

    def judged(self, pairs: pd.DataFrame) -> pd.DataFrame:
        """Paired checkpoints with their standard error, the reference level and slope, tau and z."""
        out = pairs.copy()
        out["stderr"] = measurement_error(pairs)
        out["level"] = out["reference"].abs()
        out["slope"] = log_slope(out["step"].to_numpy(dtype=float), out["reference"].to_numpy(dtype=float),
                                 out["step"].to_numpy(dtype=float))
        floor = eval_set_offset(pairs)
        out["tau"] = self.noise.tau(out["level"], out["slope"], floor)
        out["z"] = self.noise.z(out["delta"], out["stderr"], out["level"], out["slope"], floor)
        out["band"] = self.z_threshold * np.hypot(out["stderr"], out["tau"])
        return out

    # --- judging -------------------------------------------------------------------------------
    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        if reference is None:
            return []
        stat = self.stat(run, reference)
        if stat is None:
            return []
        per_set = heldout_pairs(run, reference, stat)
        out = []
        if len(per_set) == 1:
            (name, pairs), = per_set.items()
            out += self._judge(run, reference, self.judged(pairs), heldout_sets(run.scalars.columns)[name][stat],
                               name, stat, relative=False)
        else:
            metric = ALL_SETS if stat == "loss" else ALL_SETS + "_bpb"
            out += self._judge(run, reference, self.judged(over_sets(per_set)), metric, "all", stat, relative=False)
            for name, pairs in per_set.items():
                out += self._judge(run, reference, self.judged(pairs), heldout_sets(run.scalars.columns)[name][stat],
                                   name, stat, relative=True)
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def checkpoint_deltas(self, run: RunData, reference: RunData) -> pd.DataFrame:
        """(step, delta, band) at each judged checkpoint: run - reference of the sets together
        (the one set, where there is one) and the band a detection there had to clear, as the
        held-out delta chart draws them (`Drawing.HELDOUT_BAND`)."""
        stat = self.stat(run, reference)
        per_set = heldout_pairs(run, reference, stat) if stat is not None else {}
        if not per_set:
            return pd.DataFrame({c: pd.Series(dtype=float) for c in ("step", "delta", "band")})
        frame = self.judged(next(iter(per_set.values())) if len(per_set) == 1 else over_sets(per_set))
        frame = frame[np.isfinite(frame["z"].to_numpy(dtype=float))]
        return frame[["step", "delta", "band"]].reset_index(drop=True)

    def clean(self, run: RunData, reference: RunData | None = None) -> list[Clean]:
        """Paired checkpoints (the sets together) whose difference, with its 90% interval, lies
        inside the band a detection must clear: held-out loss is tied there."""
        stat = None if reference is None else self.stat(run, reference)
        if stat is None:
            return []
        frame = self.judged(over_sets(heldout_pairs(run, reference, stat)))
        frame = frame[np.isfinite(frame["z"].to_numpy(dtype=float))]
        d, se, band = (frame[c].to_numpy(dtype=float) for c in ("delta", "stderr", "band"))
        with np.errstate(invalid="ignore"):
            tied = np.abs(d) + CLEAN_Z * se <= band
        metric = ALL_SETS if stat == "loss" else ALL_SETS + "_bpb"
        return [self._clean(run, metric, step, step, {"delta": float(x), "stderr": float(e), "band": float(b)},
                            alike_to=reference)
                for step, x, e, b, ok in zip(frame["step"], d, se, band, tied) if ok]

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        if reference is None:
            return []
        if not heldout_sets(run.scalars.columns):
            return [NotJudged(self.name, "the run logs no held-out loss")]
        stat = self.stat(run, reference)
        if stat is None:
            unshared = unshared_heldout(run, reference)
            if unshared:
                return [NotJudged(self.name, unshared)]
            if not heldout_sets(reference.scalars.columns):
                return [NotJudged(self.name, "the reference logs no held-out loss")]
            return [NotJudged(self.name, "no checkpoint of the run can be paired with the reference's evaluations "
                              "(no common set, or no reference evaluation around the run's)")]
        pairs = over_sets(heldout_pairs(run, reference, stat))
        if len(pairs) < MIN_NOISE_POINTS and not np.isfinite(pairs["logged_se"]).any():
            return [NotJudged(self.name, f"{len(pairs)} paired checkpoint(s) and no logged standard error: the "
                              f"eval noise is estimated from {MIN_NOISE_POINTS}", ALL_SETS,
                              f"{MIN_NOISE_POINTS - len(pairs)} more checkpoints")]
        return self._past_the_reference(run, reference, stat)

    def _past_the_reference(self, run: RunData, reference: RunData, stat: str) -> list[NotJudged]:
        """The run's checkpoints beyond the reference's evaluations (a reference that stopped, the
        run going on), said once for the sets: no checkpoint there pairs with one of the reference's.
        A stretch shorter than the reference's own interval between evaluations is where its next
        one would fall, and is not said."""
        shared = heldout_sets(reference.scalars.columns)
        for name, keys in heldout_sets(run.scalars.columns).items():
            key = keys.get(stat)
            if key is None or key not in shared.get(name, {}).values():
                continue
            apart = overlap(run, reference, key)
            beyond = apart.not_compared() if apart is not None else ""
            if beyond:
                return [NotJudged(self.name, f"the run's checkpoints {beyond}", ALL_SETS)]
        return []

    def _judge(self, run, reference, frame: pd.DataFrame, metric: str, name: str, stat: str,
               relative: bool) -> list:
        frame = frame[np.isfinite(frame["z"].to_numpy(dtype=float))].reset_index(drop=True)
        if len(frame) < self.persist_checkpoints:
            return []
        steps = frame["step"].to_numpy()
        d, z = frame["delta"].to_numpy(dtype=float), frame["z"].to_numpy(dtype=float)
        band = frame["band"].to_numpy(dtype=float)
        if relative:
            band = np.fmax(band, self.min_relative_effect * frame["level"].to_numpy(dtype=float))
        flag = (np.abs(z) > self.z_threshold) & (np.abs(d) > band)
        out = []
        for a, b in signed_runs(flag, d, None, self.persist_checkpoints):
            sl = slice(a, b + 1)
            ratio = np.abs(d[sl]) / band[sl]
            k = a + int(np.argmax(ratio))
            typical = float(np.median(d[sl]))
            worse = typical > 0
            evidence = {
                "delta": float(d[k]), "delta_median": typical, "band": float(band[k]),
                "stderr": float(frame["stderr"].iloc[k]), "tau": float(frame["tau"].iloc[k]), "z": float(z[k]),
                "p_value": float(2 * sps.norm.sf(abs(z[k]))), "n": int(b - a + 1),
                "run_value": float(frame["run"].iloc[k]), "reference_value": float(frame["reference"].iloc[k]),
                "interpolated": int((~frame["exact"].iloc[sl].astype(bool)).sum()),
                "set": name, "stat": stat, "direction": "above" if worse else "below",
            }
            if "sets" in frame:
                evidence["sets"] = int(frame["sets"].iloc[k])
            what = "held-out loss over all sets (median)" if name == "all" else f"held-out {name} {stat}"
            message = (f"{what} {abs(typical):.3f} {'above' if worse else 'below'} the reference at {b - a + 1:,} "
                       f"checkpoints (each had to clear ±{np.median(band[sl]):.3f}): the run "
                       f"{'generalises worse' if worse else 'generalises better'} than its reference")
            score = float(ratio.max())
            out.append(self._detection(run, reference, metric, steps[a], steps[b], steps[k], score,
                                       severity_for(score, self.critical_ratio), message, evidence,
                                       known=steps[a + self.persist_checkpoints - 1]))
        return out
