"""Train loss of the run minus the reference, window by window over the steps both logged.

Each window shows the median of the per-step difference (a median, so a spike in either run does
not move it) with its standard error, autocorrelation accounted for: the same window statistics
the reference-divergence detector judges by (monitor.detectors.stats), so the table and the
verdict agree. A window is marked when a divergence detection overlaps it. Where the run goes on
past its reference (or starts before it), the note and the verdict say which of the run's steps
the rows compare (monitor/detectors/overlap.py); a run that ends first is compared up to its last
step, which needs no word.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.detectors.overlap import Overlap, overlap
from monitor.detectors.stats import window_summaries
from monitor.schema import TRAIN_LOSS, Section

from app.report.model import Column, Estimate, Table
from app.report.pair import NO_REFERENCE, ComparedPair, finding_names


NOTE = ("Δ is the median over the window of the per-step difference; se accounts for autocorrelation. "
        "Negative: the run's train loss is below the reference's. z is Δ over that se alone: a finding "
        "must also clear the persistent offset between two seeds of one recipe, so a large z is not one "
        "by itself.")


@dataclass
class TrainTableConfig:
    """How the train-loss comparison is cut."""

    # Rows of the table: enough to see when a gap opened (the reference reproduction's opened at
    # ~900k of 1.4M steps), few enough to read at a glance.
    windows: int = 8
    # The series compared.
    metric: str = TRAIN_LOSS


def train_delta_table(pair: ComparedPair, config: TrainTableConfig | None = None) -> Table:
    config = config or TrainTableConfig()
    table = Table(
        id="train_delta",
        title=f"Train loss delta by window ({config.metric})",
        columns=[
            Column("window", "steps", fmt=""),
            Column("n", "points", fmt="d"),
            Column("run", "run (median)", fmt=".4f"),
            Column("reference", "reference (median)", fmt=".4f"),
            Column("delta", "Δ run − ref ± se", fmt=".4f", signed=True),
            Column("z", "z (within window)", fmt=".1f", signed=True),
            Column("flagged", "finding", fmt=""),
        ],
        note=NOTE,
        flag_key="flagged",
    )
    if pair.aligned_reference is None:
        table.empty_reason = NO_REFERENCE
        return table
    r = _finite(pair.aligned_run.series(config.metric))
    f = _finite(pair.aligned_reference.series(config.metric))
    common = r.index.intersection(f.index)
    shared = overlap(pair.run, pair.aligned_reference, config.metric)
    if len(common) == 0:
        table.empty_reason = _why_empty(pair, config.metric, shared)
        return table
    # A reference that stops before the run leaves the rest of the run compared with nothing:
    # the table says so rather than ending at the reference's last step without a word.
    table.scope = shared.clause() if shared is not None else ""
    if table.scope:
        table.note = f"{table.scope[:1].upper()}{table.scope[1:]}. {NOTE}"
    steps = common.to_numpy()
    lo, hi = int(steps[0]), int(steps[-1])
    width = max(1, math.ceil((hi - lo + 1) / config.windows))
    offset = steps - lo
    rv, fv = _at(r, common), _at(f, common)
    d = window_summaries(offset, rv - fv, width)
    rw = window_summaries(offset, rv, width)
    fw = window_summaries(offset, fv, width)
    flagged = pair.findings(Section.TRAIN, config.metric)
    se = d.median_se
    for i in range(len(d)):
        first, last = int(d.first_step[i]) + lo, int(d.last_step[i]) + lo
        hits = [x for x in flagged if _covers(x, first, last)]
        z = float(d.median[i] / se[i]) if se[i] > 0 else None
        table.rows.append({
            "window": f"{first:,}–{last:,}",
            "first_step": first,
            "last_step": last,
            "n": int(d.n[i]),
            "run": float(rw.median[i]),
            "reference": float(fw.median[i]),
            "delta": Estimate(float(d.median[i]), float(se[i])),
            "z": z,
            "flagged": finding_names(hits),
        })
    return table


def _covers(d, first: int, last: int) -> bool:
    """A finding marks a window when it covers at least half of it, or the window holds at least
    half of the finding: an interval that merely touches a window's edge does not mark it."""
    overlap = min(d.end_step, last) - max(d.start_step, first) + 1
    return overlap > 0 and (2 * overlap >= last - first + 1 or 2 * overlap >= d.end_step - d.start_step + 1)


def _at(s, steps):
    """Values of `s` at `steps` (all among its own): the run's steps themselves in the common case,
    where a label lookup would hash every one of a million steps."""
    return s.to_numpy() if s.index.equals(steps) else s.loc[steps].to_numpy()


def _finite(s):
    return s[np.isfinite(s.to_numpy(dtype=float))]


def _why_empty(pair: ComparedPair, metric: str, shared: Overlap | None) -> str:
    missing = pair.not_logged_by(metric)
    if missing:
        return f"{metric} not logged by {' and '.join(repr(m) for m in missing)}"
    if shared is not None and shared.compared is None:
        return shared.no_common_step()
    return f"the two runs logged {metric} at no common step"
