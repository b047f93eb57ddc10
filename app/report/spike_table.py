"""Spike scores of both runs, by the definitions of the detector that draws them
(`Drawing.SPIKE_SCORES`).

Two runs fed the same data order spike at the same steps (the SOAP and Muon runs in
the real logs both spike at 919 and 947), so the table sets the run's spikes beside the
reference's, and counts how many of the run's spikes the reference shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.detectors import Detector, drawn_by, in_section
from monitor.schema import Detection, Drawing, Section

from app.report.model import Column, Table
from app.report.pair import ComparedPair


@dataclass
class SpikeTableConfig:
    """How spikes of the two runs are compared."""

    # A run's spike is shared when the reference spiked within this many steps of it: the same
    # batch hits both runs at the same step, give or take the logging interval.
    shared_within_steps: int = 2


def spike_detector(pair: ComparedPair) -> Detector | None:
    """The detector that scores spikes, as the pair was judged with it (its definition and score
    window); None when no detector does."""
    return drawn_by(Drawing.SPIKE_SCORES, pair.detect.params)


def spike_scores(pair: ComparedPair) -> dict[str, pd.DataFrame]:
    """Each run's spike-score series (step, key, value) by run name: the series the detectors
    produced when they judged the pair, else computed here (seconds on a million-step run)."""
    detector = spike_detector(pair)
    out = {}
    for data, _ in pair.each_run():
        series = pair.detector_series.get(data.name)
        if detector is not None and (series is None or not series["key"].isin(detector.score_keys.values()).any()):
            series = detector.score_series(data)
        out[data.name] = series if series is not None else pd.DataFrame(columns=["step", "key", "value"])
    return out


def spike_table(pair: ComparedPair, config: SpikeTableConfig | None = None,
                scores: dict[str, pd.DataFrame] | None = None) -> Table:
    config = config or SpikeTableConfig()
    scores = scores if scores is not None else spike_scores(pair)
    detector = spike_detector(pair)
    table = Table(
        id="spikes",
        title="Loss and grad-norm spikes",
        columns=[
            Column("run", "run", fmt=""),
            Column("metric", "metric", fmt=""),
            Column("spikes", "spikes", fmt="d"),
            Column("shared", "shared with the other run", fmt=""),
            Column("max_score", "max spike score", fmt=".2%"),
            Column("final_score", "final spike score", fmt=".2%"),
            Column("worst", "largest spike", fmt=""),
        ],
    )
    if detector is None:
        table.empty_reason = "no detector scores spikes"
        return table
    table.note = (f"Spike score: share of the last {detector.score_window:,} logged steps that "
                  f"were spikes ({detector.definition} rule, the OLMo-core statistic). A spike "
                  f"is shared when the other run spiked within {config.shared_within_steps} steps.")
    each = pair.each_run()
    for i, (data, found) in enumerate(each):
        others = each[:i] + each[i + 1:]  # the run its spikes may be shared with (none: a run alone)
        mine_scores = scores[data.name]
        unjudged = {n.metric: n for n in pair.not_judged.get(data.name, []) if n.detector == detector.name}
        for metric, score_key in detector.score_keys.items():
            if data.series(metric).empty:
                continue
            if metric in unjudged:
                # Too short for a verdict: no spike count and no score, which would read as clean.
                table.rows.append({"run": data.name, "metric": metric, "spikes": None, "shared": "—",
                                   "max_score": None, "final_score": None,
                                   "worst": f"not judged: {unjudged[metric].reason}", "peak_steps": []})
                continue
            mine = _spikes(found, metric)
            theirs = np.array(sorted(d.peak_step for _, other_found in others for d in _spikes(other_found, metric)))
            shared = sum(_near(d.peak_step, theirs, config.shared_within_steps) for d in mine)
            s = mine_scores.loc[mine_scores["key"] == score_key, "value"].to_numpy()
            worst = max(mine, key=lambda d: d.score, default=None)
            table.rows.append({
                "run": data.name, "metric": metric, "spikes": len(mine),
                # Stored detections sit on each run's own steps: comparable only on the step axis.
                "shared": (f"{shared}/{len(mine)}"
                           if any(o.series(metric).size for o, _ in others) and pair.axis == "step" else "—"),
                "max_score": float(s.max()) if s.size else None,
                "final_score": float(s[-1]) if s.size else None,
                "worst": (f"step {worst.peak_step:,}: {worst.message}" if worst is not None else ""),
                "peak_steps": [int(d.peak_step) for d in mine],
            })
    if not table.rows:
        table.empty_reason = pair.none_logged("train loss or grad norm")
    return table


def _spikes(found: list[Detection], metric: str) -> list[Detection]:
    return in_section(found, Section.GRAD_NORM, metric)


def _near(step: int, others: np.ndarray, within: int) -> bool:
    if others.size == 0:
        return False
    i = np.searchsorted(others, step)
    nearest = [others[j] for j in (i - 1, i) if 0 <= j < others.size]
    return any(abs(int(o) - step) <= within for o in nearest)
