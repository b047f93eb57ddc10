"""Incidents in one line each, as `gapwatch detect`, the report and the dashboard's alert list print
them.

The words are the detectors': a lone detection is its own message, and an incident of several is
headed by its worst one (for a divergence, the message gives the window median and the band it had
to clear). Only the counting, and what else the incident holds, are said here.
"""

from __future__ import annotations

import math

from monitor.alerting.grouping import Incident
from monitor.alerting.incidents import Alert


def steps(incident: Incident) -> str:
    a, b = incident.start_step, incident.end_step
    return f"{a:,}" if a == b else f"{a:,}–{b:,}"


def headline(incident: Incident) -> str:
    """The naming finding's words, how often it recurred, and what else the incident holds.

    "N times" counts only the naming detector's findings on the naming metric: a divergence that
    holds a held-out and a train-loss finding is one held-out divergence, with the train loss
    named after it, not "2 times"."""
    worst = incident.worst
    same = [d for d in incident.detections if (d.detector, d.metric) == (worst.detector, worst.metric)]
    lost = [d.evidence.get("lost_s") for d in incident.detections]
    total = (f", {sum(lost):,.0f} s lost in all" if all(isinstance(x, (int, float)) and math.isfinite(x) for x in lost)
             else "")
    if len(same) == 1:
        text = worst.message
    else:
        spread = f" in {incident.episodes} episodes" if incident.episodes > 1 else ""
        if incident.period_steps is not None:
            spread += f", one every ~{incident.period_steps:,.0f} steps"
        text = f"{len(same)} times{spread}{total}; worst at step {int(worst.peak_step):,}: {worst.message}"
    return text + (also(incident.alert) if incident.alert is not None else "")


def also(alert: Alert) -> str:
    """"; also: ..." naming the incident's members other than the one that names it: another
    explanation by itself, one the incident is already named by (its detector on another metric)
    by what was found there; "" when it has none."""
    naming = alert.members.get(f"{alert.detector}|{alert.metric}")
    named_by = naming.explanation if naming is not None else None
    others = [m.explanation if m.explanation != named_by else m.message
              for m in alert.members.values() if m is not naming]
    others = list(dict.fromkeys(others))
    return f"; also: {'; '.join(others)}" if others else ""
