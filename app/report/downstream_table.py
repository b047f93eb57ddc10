"""Downstream evals per task at the last checkpoint both runs evaluated: delta, both standard
errors, and whether the difference is significant.

Standard errors come from the runs' logs (`.../stderr`), else from the binomial error of a
proportion with its `.../n` (monitor.detectors.eval_keys.stderr_of), else from the scatter of the
task's curve between checkpoints (marked ≈). A run evaluates dozens of tasks, so about one in
twenty would differ at p < 0.05 by chance alone: significance is called on Benjamini-Hochberg
q-values across the table (scipy.stats.false_discovery_control), not on raw p-values.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from monitor.detectors.eval_keys import downstream_aggregate, downstream_metrics, matching_steps, stderr_of
from monitor.schema import Section

from app.report.model import Column, Estimate, Table
from app.report.pair import NO_REFERENCE, ComparedPair, finding_names
from app.report.uncertainty import scatter_sigma



@dataclass
class DownstreamTableConfig:
    """When a downstream difference is called significant."""

    # False discovery rate across all tasks of the table (Benjamini-Hochberg): the conventional 5%.
    fdr: float = 0.05


def downstream_table(pair: ComparedPair, config: DownstreamTableConfig | None = None) -> Table:
    config = config or DownstreamTableConfig()
    run, ref = pair.aligned_run, pair.aligned_reference
    table = Table(
        id="downstream",
        title="Downstream evals per task (last shared checkpoint)",
        columns=[
            Column("task", "task", fmt=""),
            Column("metric", "metric", fmt=""),
            Column("step", "step", fmt=","),
            Column("run", "run ± se", fmt=".4f"),
            Column("reference", "reference ± se", fmt=".4f"),
            Column("delta", "Δ run − ref", fmt=".4f", signed=True),
            Column("z", "z", fmt=".1f", signed=True),
            Column("q", "q (BH)", fmt=".3g"),
            Column("better", f"better (q < {config.fdr:g})", fmt=""),
        ],
        note=(f"z = Δ / sqrt(se_run² + se_ref²); q: Benjamini-Hochberg adjusted p-value over the "
              f"table's tasks; 'better' names a run only when q < {config.fdr:g}. "
              f"≈ marks an error estimated from the scatter between checkpoints (no run logged one): "
              f"it misses the eval set's sampling error, so a ≈ verdict is a hint, not a finding."),
        flag_key="flagged",
    )
    if ref is None:
        table.empty_reason = NO_REFERENCE
        return table
    metrics = downstream_metrics(set(run.scalars.columns) & set(ref.scalars.columns))
    rows = []
    for m in metrics:
        steps = matching_steps(run, ref, m.key)
        if len(steps) == 0:
            continue
        last = steps[-1:]
        r, f, estimated = _at_last(pair, m, steps)
        delta = r.value - f.value
        se = math.hypot(r.stderr, f.stderr) if r.stderr is not None and f.stderr is not None else None
        z = delta / se if se and se > 0 else None
        hits = pair.findings(Section.DOWNSTREAM, m.key)
        rows.append({
            "task": m.task, "metric": m.metric, "key": m.key, "step": int(last[0]),
            "run": r, "reference": f, "delta": Estimate(delta, se, estimated=estimated),
            "z": z, "p": 2 * stats.norm.sf(abs(z)) if z is not None else None,
            "lower_is_better": m.lower_is_better,
            "flagged": finding_names(hits),
        })
    if not rows:
        table.empty_reason = _why_empty(pair)
        return table
    _add_q_values(rows, config.fdr)
    rows.sort(key=lambda row: -abs(row["z"]) if row["z"] is not None else 0.0)
    table.rows = rows
    with warnings.catch_warnings():
        # Tasks without logged error bars are all-NaN slices there; the aggregate then falls back
        # to the spread across tasks, as documented, and the warning says nothing new.
        warnings.simplefilter("ignore", RuntimeWarning)
        agg = downstream_aggregate(run, ref, np.array([max(row["step"] for row in rows)]))
    if len(agg) and math.isfinite(float(agg["mean_rel"].iloc[0])):
        a = agg.iloc[0]
        table.note += (f" Across {int(a['tasks'])} tasks at step {int(a['step']):,}: mean relative "
                       f"advantage of the run {float(a['mean_rel']):+.2%} (z = {float(a['z']):+.1f}).")
    return table


def _at_last(pair: ComparedPair, m, steps: np.ndarray) -> tuple[Estimate, Estimate, bool]:
    """Both runs' values at the last shared checkpoint with their standard errors: logged (or
    binomial from n) where each run has them, else each run's share of the difference's scatter
    across all shared checkpoints (uncertainty.py), assuming both runs are equally noisy."""
    run, ref = pair.aligned_run, pair.aligned_reference
    values = [float(d.values_at(m.key, steps[-1:])[0]) for d in (run, ref)]
    errors = [float(stderr_of(d, m, steps[-1:])[0]) for d in (run, ref)]
    if all(math.isfinite(e) for e in errors):
        return Estimate(values[0], errors[0]), Estimate(values[1], errors[1]), False
    delta = run.values_at(m.key, steps) - ref.values_at(m.key, steps)
    share = scatter_sigma(delta) / math.sqrt(2)
    share = share if math.isfinite(share) else None
    return Estimate(values[0], share, estimated=True), Estimate(values[1], share, estimated=True), True


def _add_q_values(rows: list[dict], fdr: float) -> None:
    judged = [row for row in rows if row["p"] is not None]
    if judged:
        q = stats.false_discovery_control(np.array([row["p"] for row in judged]), method="bh")
        for row, qv in zip(judged, q):
            row["q"] = float(qv)
    for row in rows:
        row.setdefault("q", None)
        significant = row["q"] is not None and row["q"] < fdr
        run_higher = row["delta"].value > 0
        run_better = run_higher != row["lower_is_better"]
        # Errors estimated from checkpoint scatter miss the eval set's own sampling error, which
        # every checkpoint shares: a difference judged with them is a hint, marked ≈.
        estimated = row["delta"].estimated
        winner = ("run" if run_better else "reference") if significant else ""
        row["better"] = f"{winner} ≈" if winner and estimated else winner
        row["significant"] = significant and not estimated
        row["significant_estimated"] = significant and estimated


def _why_empty(pair: ComparedPair) -> str:
    who = [d.name for d in (pair.run, pair.reference) if not downstream_metrics(d.scalars.columns)]
    if who:
        return f"no downstream evals logged by {' and '.join(repr(w) for w in who)}"
    return "the two runs share no downstream metric evaluated at a matching checkpoint"
