"""Held-out loss per set at checkpoints both runs evaluated: delta ± standard error.

This is how a reproduction reports its result ("−0.004 at 1M steps, +0.003 at the end of
stage 1"): a few checkpoints spread over the run, the last one always, and for each set how often
the two runs were within `z_tied` standard errors of each other over every shared checkpoint.
Checkpoints are paired by monitor.judging.align (same step, or same tokens), never interpolated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.detectors.eval_keys import heldout_sets, matching_steps
from monitor.schema import Section

from app.report.model import Column, Estimate, Table
from app.report.pair import NO_REFERENCE, ComparedPair, finding_names
from app.report.uncertainty import scatter_sigma



@dataclass
class HeldoutTableConfig:
    """Which checkpoints the held-out table shows and when two losses count as tied."""

    # Checkpoints shown per set, evenly spread over the shared ones; the last is always shown.
    checkpoints: int = 4
    # |Δ| within this many standard errors counts as tied: two-sided ~95% for a normal error.
    z_tied: float = 2.0
    # Statistic compared: "loss" (nats per token) or "bpb" (bits per byte) when only that is logged.
    stat: str = "loss"


def heldout_table(pair: ComparedPair, config: HeldoutTableConfig | None = None) -> Table:
    config = config or HeldoutTableConfig()
    run, ref = pair.aligned_run, pair.aligned_reference
    table = Table(
        id="heldout",
        title=f"Held-out {config.stat} per set at matching checkpoints",
        columns=[Column("set", "set", fmt="")],
        note=(f"Δ = run − reference ± standard error of the difference. ≈ marks an error estimated "
              f"from the scatter of Δ across checkpoints (no run logged one). 'within {config.z_tied:g} se' "
              f"counts the shared checkpoints where |Δ| ≤ {config.z_tied:g} se."),
        flag_key="flagged",
    )
    if ref is None:
        table.empty_reason = NO_REFERENCE
        return table
    sets = heldout_sets(set(run.scalars.columns) & set(ref.scalars.columns))
    sets = {name: keys for name, keys in sorted(sets.items()) if config.stat in keys}
    if not sets:
        table.empty_reason = _why_empty(pair, config.stat)
        return table
    per_set = {name: matching_steps(run, ref, keys[config.stat]) for name, keys in sets.items()}
    shown = _spread(np.unique(np.concatenate(list(per_set.values()))), config.checkpoints)
    table.columns += [Column(f"at_{s}", f"Δ at step {s:,}", fmt=".4f", signed=True) for s in shown]
    table.columns += [
        Column("mean_delta", "mean Δ (all shared)", fmt=".4f", signed=True),
        Column("max_abs_delta", "largest |Δ|", fmt=".4f"),
        Column("tied", f"within {config.z_tied:g} se", fmt=""),
        Column("flagged", "finding", fmt=""),
    ]
    for name, keys in sets.items():
        key = keys[config.stat]
        steps = per_set[name]
        deltas = _deltas(pair, keys, key, steps)
        row: dict = {"set": name, "key": key, "checkpoints": int(len(steps))}
        for s in shown:
            row[f"at_{s}"] = deltas.get(int(s))
        values = [e for e in deltas.values() if math.isfinite(e.value)]
        if values:
            mean = float(np.mean([e.value for e in values]))
            row["mean_delta"] = Estimate(mean, None)
            row["max_abs_delta"] = float(max(abs(e.value) for e in values))
            judged = [e for e in values if e.stderr is not None and math.isfinite(e.stderr)]
            tied = sum(abs(e.value) <= config.z_tied * e.stderr for e in judged)
            row["tied"] = f"{tied}/{len(judged)}" if judged else "no error bars"
        hits = pair.findings(Section.HELDOUT, key)
        row["flagged"] = finding_names(hits)
        table.rows.append(row)
    return table


def _spread(steps: np.ndarray, k: int) -> list[int]:
    """k steps evenly spread through `steps`, the last one included (all of them when k >= n)."""
    n = len(steps)
    if n == 0 or k <= 0:
        return []
    positions = sorted({math.ceil(i * n / k) - 1 for i in range(1, k + 1)})
    return [int(steps[p]) for p in positions]


def _deltas(pair: ComparedPair, keys: dict[str, str], key: str, steps: np.ndarray) -> dict[int, Estimate]:
    run, ref = pair.aligned_run, pair.aligned_reference
    delta = run.values_at(key, steps) - ref.values_at(key, steps)
    se_r, se_f = _logged_stderr(run, keys, key, steps), _logged_stderr(ref, keys, key, steps)
    if se_r is not None and se_f is not None:
        se, estimated = np.sqrt(se_r ** 2 + se_f ** 2), False
    else:
        se, estimated = np.full(len(steps), scatter_sigma(delta)), True
    out = {}
    for i, s in enumerate(steps):
        err = float(se[i]) if math.isfinite(se[i]) else None
        out[int(s)] = Estimate(float(delta[i]), err, estimated=estimated)
    return out


def _logged_stderr(aligned, keys: dict[str, str], key: str, steps: np.ndarray) -> np.ndarray | None:
    """The run's logged standard error of the loss at `steps`, or None if it has none there."""
    se_key = keys.get("stderr")
    # A logged stderr belongs to the loss; it says nothing about bits per byte.
    if se_key is None or not key.endswith("/loss") or se_key not in aligned.scalars.columns:
        return None
    se = aligned.values_at(se_key, steps)
    return se if np.isfinite(se).all() else None


def _why_empty(pair: ComparedPair, stat: str) -> str:
    mine = heldout_sets(pair.run.scalars.columns)
    theirs = heldout_sets(pair.reference.scalars.columns)
    if not any(stat in k for k in mine.values()) or not any(stat in k for k in theirs.values()):
        who = [d.name for d, sets in ((pair.run, mine), (pair.reference, theirs))
               if not any(stat in k for k in sets.values())]
        return f"no held-out {stat} logged by {' and '.join(repr(w) for w in who)}"
    return "the two runs share no held-out set evaluated at a matching checkpoint"
