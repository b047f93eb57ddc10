"""Held-out divergence: held-out loss against the reference at matching checkpoints, over all
sets together and per set, with standard errors where the runs log them.

At every checkpoint both runs evaluated (after alignment), d = run - reference for each set.

* Over all sets: the median of d across the sets (a model that generalises differently moves
  every set; one odd set cannot move a median) must stay within a band of `min_effect` nats
  (seeds of one recipe differ by a few hundredths on held-out data too, however small the
  standard error of a large eval set) or `z_threshold` standard errors, whichever is larger.
* Per set (when there are several): d must stay within `min_relative_effect` of the set's loss
  or `z_threshold` combined standard errors. Single small sets wander between two runs of one
  config far more than the model-level difference does, so a set alone needs a larger effect.

Both bands add how far the reference moves when its step axis is stretched by
`step_shift_tolerance` (timing early in training). A detection is `persist_checkpoints`
consecutive counting checkpoints of one sign. Bits per byte stands in (with `min_effect_bpb`)
for sets that log no loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from monitor.schema import HELDOUT_PREFIX, RunData, Severity

from .base import Detector, ReferenceUse
from .rundata import finite
from .eval_keys import heldout_sets, matching_steps
from .stats import MEDIAN_SE_FACTOR, shift_band, signed_runs

ALL_SETS = HELDOUT_PREFIX + "all"


@dataclass
class HeldoutDivergence(Detector):
    name: ClassVar[str] = "heldout_divergence"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.REQUIRED

    min_effect: float = 0.05
    """Largest held-out gap between any two of the 13 identical-config repeats: 0.040 nats (step
    125), ~0.02 later; OLMo ladder run vs rerun, median over 11 sets: under 0.05 (0.042 on c4
    for the 3B early in training)."""
    min_effect_bpb: float = 0.02
    """The same in bits per byte: 0.05 nats / ln 2 / ~4 bytes per token."""
    min_relative_effect: float = 0.05
    """One set alone: OLMo ladder run vs rerun differ on the ICE set by up to 0.146 nats (3.6% of
    its loss) for a thousand steps (190M) and by 0.134 late in training (1B), while c4 stays
    within 0.02: a single set needs 5% of its loss."""
    z_threshold: float = 3.0
    """Standard errors an effect must exceed."""
    persist_checkpoints: int = 2
    """Consecutive flagged checkpoints of one sign that make a detection."""
    step_shift_tolerance: float = 0.02
    """As for train loss: two seeds reach a loss a few percent of steps apart early on."""
    critical_ratio: float = 3.0
    """An effect this many times its band is CRITICAL."""

    def columns(self, run: RunData) -> list[str]:
        return [k for stats in heldout_sets(run.scalars.columns).values() for k in stats.values()]

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        if reference is None:
            return []
        diffs = self.differences(run, reference)
        if not diffs:
            return []
        out = []
        for stat in ("loss", "bpb"):
            sets = {name: frame for (name, st), frame in diffs.items() if st == stat}
            if not sets:
                continue
            floor = self.min_effect if stat == "loss" else self.min_effect_bpb
            if len(sets) == 1:
                (name, frame), = sets.items()
                out.extend(self._judge(run, reference, frame, floor, frame["key"].iloc[0], name, stat))
                continue
            out.extend(self._judge(run, reference, _median_over_sets(sets), floor,
                                   ALL_SETS if stat == "loss" else ALL_SETS + "_bpb", "all", stat))
            for name, frame in sorted(sets.items()):
                rel = self.min_relative_effect * frame["reference"].abs().to_numpy()
                out.extend(self._judge(run, reference, frame, rel, frame["key"].iloc[0], name, stat))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def differences(self, run: RunData, reference: RunData) -> dict[tuple[str, str], pd.DataFrame]:
        """Per (set, stat): steps both runs evaluated, d, its standard error (NaN when not
        logged), the reference's value and the shift band there."""
        out = {}
        theirs = heldout_sets(reference.scalars.columns)
        for name, ours in sorted(heldout_sets(run.scalars.columns).items()):
            other = theirs.get(name, {})
            stat = "loss" if "loss" in ours and "loss" in other else "bpb" if "bpb" in ours and "bpb" in other else None
            if stat is None:
                continue
            key = ours[stat]
            steps = matching_steps(run, reference, key)
            if steps.size == 0:
                continue
            r = run.scalars[key].reindex(steps).to_numpy(dtype=float)
            f = reference.scalars[key].reindex(steps).to_numpy(dtype=float)
            se = np.full(steps.size, np.nan)
            if stat == "loss" and "stderr" in ours and "stderr" in other:
                se = np.sqrt(run.scalars[ours["stderr"]].reindex(steps).to_numpy(dtype=float) ** 2
                             + reference.scalars[other["stderr"]].reindex(steps).to_numpy(dtype=float) ** 2)
            ref_all = finite(reference, key)
            shift = shift_band(ref_all.index.to_numpy(dtype=float), ref_all.to_numpy(dtype=float),
                               steps.astype(float), self.step_shift_tolerance)
            out[(name, stat)] = pd.DataFrame({"step": steps, "d": r - f, "se": se, "run": r, "reference": f,
                                              "shift": shift, "key": key})
        return out

    def _judge(self, run, reference, frame: pd.DataFrame, floor, metric: str, name: str, stat: str) -> list:
        if len(frame) < self.persist_checkpoints:
            return []
        steps = frame["step"].to_numpy()
        d, se = frame["d"].to_numpy(dtype=float), frame["se"].to_numpy(dtype=float)
        band = np.fmax(floor, np.nan_to_num(self.z_threshold * se, nan=0.0)) + frame["shift"].to_numpy(dtype=float)
        flag = np.abs(d) > band
        out = []
        for a, b in signed_runs(flag, d, None, self.persist_checkpoints):
            sl = slice(a, b + 1)
            ratio = np.abs(d[sl]) / band[sl]
            k = a + int(np.argmax(ratio))
            z = float(d[k] / se[k]) if np.isfinite(se[k]) and se[k] > 0 else float("nan")
            evidence = {
                "delta": float(d[k]), "band": float(band[k]), "stderr": float(se[k]), "z": z,
                "p_value": float(2 * sps.norm.sf(abs(z))) if np.isfinite(z) else float("nan"),
                "n": int(b - a + 1), "run_value": float(frame["run"].iloc[k]),
                "reference_value": float(frame["reference"].iloc[k]),
                "set": name, "stat": stat, "direction": "above" if d[k] > 0 else "below",
            }
            if "sets" in frame:
                evidence["sets"] = int(frame["sets"].iloc[k])
            worse = d[k] > 0
            what = "held-out loss over all sets (median)" if name == "all" else f"held-out {name} {stat}"
            message = (f"{what} {abs(d[k]):.3f} {'above' if worse else 'below'} the reference "
                       f"(band ±{band[k]:.3f}) at {b - a + 1} checkpoints: the run "
                       f"{'generalises worse' if worse else 'generalises better'} than its reference")
            score = float(ratio.max())
            severity = Severity.CRITICAL if score >= self.critical_ratio else Severity.WARNING
            out.append(self._detection(run, reference, metric, steps[a], steps[b], steps[k], score, severity,
                                       message, evidence))
        return out


def _median_over_sets(sets: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per checkpoint: the median of d over the sets evaluated there, its standard error (from
    the sets' errors when all log them) and the median reference value and shift band."""
    wide = {col: pd.concat({n: f.set_index("step")[col] for n, f in sets.items()}, axis=1)
            for col in ("d", "se", "run", "reference", "shift")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        n = wide["d"].notna().sum(axis=1)
        se_all = MEDIAN_SE_FACTOR * np.sqrt((wide["se"] ** 2).sum(axis=1, min_count=1)) / n
        se_all[wide["se"].isna().where(wide["d"].notna(), False).any(axis=1)] = np.nan
        frame = pd.DataFrame({"step": wide["d"].index.to_numpy(), "d": wide["d"].median(axis=1).to_numpy(),
                              "se": se_all.to_numpy(), "run": wide["run"].median(axis=1).to_numpy(),
                              "reference": wide["reference"].median(axis=1).to_numpy(),
                              "shift": wide["shift"].median(axis=1).to_numpy(), "sets": n.to_numpy()})
    return frame
