"""Held-out divergence: held-out loss per set against the reference at matching checkpoints.

At every checkpoint both runs evaluated (after alignment), d = run - reference. It counts when
|d| exceeds a band of

* `z_threshold` combined standard errors, where both runs log `eval/heldout/<set>/stderr`, and
  at least `min_effect` nats (seeds of one recipe differ by a few hundredths on held-out data
  too, however small the standard error of a large eval set), plus
* how far the reference moves when its step axis is stretched by `step_shift_tolerance`.

A detection is `persist_checkpoints` consecutive counting checkpoints of one sign. Bits per byte
is compared (with `min_effect_bpb`) only for sets that log no loss.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from monitor.schema import RunData, Severity

from .base import Detector
from .eval_keys import heldout_sets, matching_steps
from .stats import shift_band, signed_runs


class HeldoutDivergence(Detector):
    name = "heldout_divergence"
    needs_reference = True

    def __init__(
        self,
        # Largest held-out gap between any two of the 13 identical-config repeats: 0.040 nats
        # (step 125), ~0.02 later; OLMo ladder run vs rerun: 0.021 / 0.015 / 0.042 nats
        # (190M / 1B / 3B, the largest early in training).
        min_effect: float = 0.05,
        # The same in bits per byte: 0.05 nats / ln 2 / ~4 bytes per token.
        min_effect_bpb: float = 0.02,
        z_threshold: float = 3.0,
        persist_checkpoints: int = 2,
        # As for train loss: two seeds reach a loss a few percent of steps apart early on.
        step_shift_tolerance: float = 0.02,
        critical_ratio: float = 3.0,
    ):
        self.min_effect = min_effect
        self.min_effect_bpb = min_effect_bpb
        self.z_threshold = z_threshold
        self.persist_checkpoints = persist_checkpoints
        self.step_shift_tolerance = step_shift_tolerance
        self.critical_ratio = critical_ratio

    def columns(self, run: RunData) -> list[str]:
        return [k for stats in heldout_sets(run.scalars.columns).values() for k in stats.values()]

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        if reference is None:
            return []
        out = []
        theirs = heldout_sets(reference.scalars.columns)
        for name, ours in sorted(heldout_sets(run.scalars.columns).items()):
            other = theirs.get(name, {})
            stat = "loss" if "loss" in ours and "loss" in other else "bpb" if "bpb" in ours and "bpb" in other else None
            if stat is None:
                continue
            out.extend(self._one_set(run, reference, name, stat, ours, other))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def _one_set(self, run, reference, name, stat, ours, other) -> list:
        key = ours[stat]
        steps = matching_steps(run, reference, key)
        if steps.size < self.persist_checkpoints:
            return []
        r = run.scalars[key].reindex(steps).to_numpy(dtype=float)
        f = reference.scalars[key].reindex(steps).to_numpy(dtype=float)
        d = r - f
        se = np.full(steps.size, np.nan)
        if stat == "loss" and "stderr" in ours and "stderr" in other:
            se = np.sqrt(run.scalars[ours["stderr"]].reindex(steps).to_numpy(dtype=float) ** 2
                         + reference.scalars[other["stderr"]].reindex(steps).to_numpy(dtype=float) ** 2)
        ref_all = reference.series(key)
        ref_all = ref_all[np.isfinite(ref_all.to_numpy(dtype=float))]
        floor = self.min_effect if stat == "loss" else self.min_effect_bpb
        band = np.fmax(floor, np.nan_to_num(self.z_threshold * se, nan=0.0))
        band = band + shift_band(ref_all.index.to_numpy(dtype=float), ref_all.to_numpy(dtype=float),
                                 steps.astype(float), self.step_shift_tolerance)
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
                "n": int(b - a + 1), "run_value": float(r[k]), "reference_value": float(f[k]),
                "set": name, "stat": stat, "direction": "above" if d[k] > 0 else "below",
            }
            worse = d[k] > 0
            message = (f"held-out {name} {stat} {abs(d[k]):.3f} {'above' if worse else 'below'} the reference "
                       f"(band ±{band[k]:.3f}) at {b - a + 1} checkpoints: the run "
                       f"{'generalises worse' if worse else 'generalises better'} than its reference")
            score = float(ratio.max())
            severity = Severity.CRITICAL if score >= self.critical_ratio else Severity.WARNING
            out.append(self._detection(run, reference, key, steps[a], steps[b], steps[k], score, severity,
                                       message, evidence))
        return out
