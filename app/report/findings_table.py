"""Every detection on either run, most severe first: the evidence behind the verdict, in full."""

from __future__ import annotations

from monitor.schema import Detection, Severity

from app.report.model import Column, Table
from app.report.pair import ComparedPair


def findings_table(pair: ComparedPair) -> Table:
    table = Table(
        id="findings",
        title="All findings",
        columns=[
            Column("run", "run", fmt=""),
            Column("severity", "severity", fmt=""),
            Column("detector", "detector", fmt=""),
            Column("metric", "metric", fmt=""),
            Column("steps", "steps", fmt=""),
            Column("message", "message", fmt=""),
        ],
        note="The run is judged against the reference; the reference is judged on its own "
             "(spikes, data, resumes, throughput).",
        flag_key="flagged",
    )
    found: list[Detection] = list(pair.detections) + list(pair.reference_detections)
    found.sort(key=lambda d: (-Severity(d.severity).rank, d.run != pair.run.name, d.start_step))
    for d in found:
        table.rows.append({
            "run": d.run, "severity": Severity(d.severity).value, "detector": d.detector,
            "metric": d.metric, "start_step": int(d.start_step), "end_step": int(d.end_step),
            "steps": (f"{d.start_step:,}" if d.start_step == d.end_step else f"{d.start_step:,}–{d.end_step:,}"),
            "message": d.message, "flagged": Severity(d.severity).rank >= Severity.WARNING.rank,
        })
    if not table.rows:
        table.empty_reason = "no detector fired on either run"
    return table
