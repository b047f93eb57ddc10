"""Every finding on either run, most severe first, grouped into incidents as the watch service
alerts on them (monitor/alerting/grouping.py): one row per incident (one story on one run, named by
its most specific explanation), with how many detections it holds, so 160 pauses of one kind or a
memorization that train-loss windows and checkpoints both see are one row each; then what the
detectors could not judge, and why, since silence reads as clean."""

from __future__ import annotations

from monitor.alerting.grouping import Incident, group, marks_of, most_severe_first, progress_from_marks
from monitor.detectors import judging
from monitor.schema import Severity

from app.findings import headline, steps
from app.report.model import Column, Table
from app.report.pair import ComparedPair


def incidents_of(pair: ComparedPair) -> list[Incident]:
    """The incidents of both runs' findings, as the watch service's tracker makes them."""
    progress = {key: last for data, _ in pair.each_run()
                for key, last in progress_from_marks(data.name, marks_of(data)).items()}
    return group([d for _, found in pair.each_run() for d in found], progress, pair.incidents, cleans=pair.cleans)


def findings_table(pair: ComparedPair, incidents: list[Incident]) -> Table:
    """One row per incident of `incidents` (incidents_of(pair)), the run's first."""
    table = Table(
        id="findings",
        title="All findings",
        columns=[
            Column("run", "run", fmt=""),
            Column("severity", "severity", fmt=""),
            Column("incident", "incident", fmt=""),
            Column("id", "id", fmt=""),
            Column("state", "state", fmt=""),
            Column("steps", "steps", fmt=""),
            Column("count", "detections", fmt="d"),
            Column("message", "finding (the worst detection of each incident)", fmt=""),
        ],
        note="One row per incident, as the watch service alerts: the detections of one story (memorization, "
             "divergence, instability, data, throughput) belong together until every detector in it shows its "
             "condition gone, and the most specific explanation names it. "
             + ("The run is judged against the reference; the reference is judged on its own (spikes, data, "
                "resumes, throughput)." if pair.reference is not None else "The run is judged on its own."),
        flag_key="flagged",
    )
    ordered = most_severe_first(incidents)
    ordered.sort(key=lambda i: (-i.severity.rank, i.run != pair.run.name))  # stable: start steps stay in order
    for i in ordered:
        table.rows.append({
            "run": i.run, "severity": i.severity.value, "incident": i.name, "id": i.incident_id,
            "state": "resolved" if i.resolved else "open", "detector": i.detector, "metric": i.metric,
            "start_step": i.start_step, "end_step": i.end_step, "steps": steps(i), "count": i.count,
            "spans": [list(span) for span in i.spans],
            "message": headline(i), "flagged": i.severity.rank >= Severity.WARNING.rank,
        })
    if not table.rows:
        table.empty_reason = ("no detector fired on either run" if pair.reference is not None
                              else "no detector fired on the run")
    return table


def not_judged_table(pair: ComparedPair) -> Table:
    table = Table(
        id="not_judged",
        title="Not judged",
        columns=[
            Column("run", "run", fmt=""),
            Column("judges", "not judged", fmt=""),
            Column("metric", "metric", fmt=""),
            Column("reason", "because", fmt=""),
            Column("needs", "what would let it judge", fmt=""),
        ],
        note="Where a detector could not judge a run or part of it, or judged it without reaching a conclusion, "
             "and why: no finding there means that nothing was shown, not that the run is clean.",
    )
    for run, items in pair.not_judged.items():
        for n in items:
            table.rows.append({"run": run, "judges": judging(n.detector), "detector": n.detector,
                               "metric": n.metric or "(all)", "reason": n.reason, "needs": n.needs or ""})
    if not table.rows:
        table.empty_reason = "every detector judged both runs" if pair.reference is not None else "every detector judged the run"
    return table
