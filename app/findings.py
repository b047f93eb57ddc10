"""Grouped findings as `gapwatch detect` and the report print them: one line per incident.

The words are the detectors': a lone detection is its own message, and an incident of several is
headed by its worst one (for a divergence, the message gives the window median and the band it had
to clear). Only the counting is said here.
"""

from __future__ import annotations

import math

from monitor.alerting.grouping import Incident


def steps(incident: Incident) -> str:
    a, b = incident.start_step, incident.end_step
    return f"{a:,}" if a == b else f"{a:,}–{b:,}"


def headline(incident: Incident) -> str:
    worst = incident.worst
    if incident.count == 1:
        return worst.message
    lost = [d.evidence.get("lost_s") for d in incident.detections]
    total = (f", {sum(lost):,.0f} s lost in all" if all(isinstance(x, (int, float)) and math.isfinite(x) for x in lost)
             else "")
    if incident.period_steps is not None:
        head = (f"{incident.count} times in {incident.episodes} bursts, one every ~{incident.period_steps:,.0f} "
                f"steps{total}")
    else:
        head = f"{incident.count} times{total}"
    return f"{head}; worst at step {int(worst.peak_step):,}: {worst.message}"
