"""Incident logic: detections in, alert changes out. Pure: no database, no clock of its own.

An incident is keyed by (run, attempt, detector, metric). The first detection of a key opens an
alert; later detections that touch it extend it (and escalate it when they are more severe); it is
resolved once the detectors have judged the metric clean for a quiet window past its last flagged
step (`resolve_after_steps`, and at least `resolve_after_points` observations of a sparse metric);
a recurrence within `cooldown_steps` of a resolution opens nothing, one that lasts beyond it opens
a new alert. Feeding the same detections twice changes nothing, so a restarted service that sees
detections again (or a detector that reports whole intervals each pass) sends nothing new.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from monitor.alerting.config import IncidentConfig
from monitor.schema import Detection, Severity

OPEN = "open"
RESOLVED = "resolved"



class ChangeKind(enum.StrEnum):
    """What a change does to an alert (the state an alert is in is OPEN or RESOLVED above)."""

    OPENED = "opened"
    EXTENDED = "extended"
    """Quiet: the row is updated, nobody is notified."""
    ESCALATED = "escalated"
    RESOLVED = "resolved"


NOTIFYING = (ChangeKind.OPENED, ChangeKind.ESCALATED, ChangeKind.RESOLVED)

IncidentKey = tuple[str, int, str, str]


@dataclass(frozen=True)
class Progress:
    """How far the detectors have judged one metric of a run, and how densely it is logged."""

    last_step: int
    spacing: float = 1.0
    """Typical steps between two logged values (1 for train loss, 1,000 for a periodic eval)."""


@dataclass
class Alert:
    """One incident, as the `alerts` table holds it."""

    run: str
    attempt: int
    detector: str
    metric: str
    state: str
    severity: Severity
    start_step: int
    end_step: int
    peak_step: int
    score: float | None
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    opened_at: float = 0.0
    updated_at: float = 0.0
    resolved_at: float | None = None
    id: int | None = None

    @property
    def key(self) -> IncidentKey:
        return (self.run, self.attempt, self.detector, self.metric)


@dataclass
class AlertChange:
    kind: ChangeKind
    alert: Alert
    """The alert itself (shared by every change to it in one batch, so it holds the final state)."""
    previous_severity: Severity | None = None
    """For ESCALATED: the severity it had before."""


def incident_key(d: Detection) -> IncidentKey:
    return (d.run, int(d.attempt or 0), d.detector, d.metric)


def score_rank(value: float | None) -> float:
    """A score to compare by: a missing or non-finite one ranks below every other."""
    return -math.inf if value is None or not math.isfinite(value) else float(value)


def spacing_of(first: int, last: int, rows: int) -> float:
    """Typical steps between two logged values of a metric (at least 1), for `Progress.spacing`."""
    return max(1.0, (last - first) / (rows - 1)) if rows > 1 and last > first else 1.0


class IncidentTracker:
    def __init__(self, config: IncidentConfig | None = None) -> None:
        self.config = config or IncidentConfig()

    def apply(
        self,
        detections: list[Detection],
        open_alerts: dict[IncidentKey, Alert],
        last_resolved: dict[IncidentKey, Alert],
        progress: dict[tuple[str, str | None], Progress],
        now: float,
    ) -> list[AlertChange]:
        """The changes that `detections` and the progress of each metric make to the alerts.

        open_alerts / last_resolved: the open alert and the most recently resolved one per key (both
        are updated in place to the state after the changes). progress: how far the detectors have
        judged each (run, metric), with (run, None) as the run-wide fallback.
        """
        changes: list[AlertChange] = []
        for d in sorted(detections, key=lambda d: (d.start_step, d.end_step)):
            key = incident_key(d)
            gap = self.quiet_window(d.detector, self.progress_of(progress, d.run, d.metric))
            alert = open_alerts.get(key)
            if alert is not None and self.ends_before(alert, d, gap):
                # The metric ran clean for a whole window between the two: that incident is over.
                changes.append(self._resolve(alert, now))
                last_resolved[key] = open_alerts.pop(key)
                alert = None
            if alert is not None:
                change = self.extend(alert, d, now)
                if change is not None:
                    changes.append(change)
                continue
            previous = last_resolved.get(key)
            if previous is not None and self.within_cooldown(previous, d):
                # Already reported (seen again after a restart) or a recurrence inside the cool-down.
                continue
            alert = self.open_alert(d, key, now)
            open_alerts[key] = alert
            changes.append(AlertChange(ChangeKind.OPENED, alert))
        for key, alert in list(open_alerts.items()):
            seen = self.progress_of(progress, alert.run, alert.metric)
            if seen is not None and seen.last_step >= alert.end_step + self.quiet_window(alert.detector, seen):
                changes.append(self._resolve(alert, now))
                last_resolved[key] = open_alerts.pop(key)
        return changes

    @staticmethod
    def ends_before(alert: Alert, d: Detection, quiet_window: int) -> bool:
        """The metric ran clean for a whole quiet window between `alert` and `d`."""
        return d.start_step > alert.end_step + quiet_window

    def within_cooldown(self, previous: Alert, d: Detection) -> bool:
        """`d` recurs inside the cool-down after `previous` was resolved: it opens nothing."""
        return d.end_step <= previous.end_step + self.config.cooldown_steps

    @staticmethod
    def progress_of(progress: dict, run: str, metric: str) -> Progress | None:
        return progress.get((run, metric), progress.get((run, None)))

    def quiet_window(self, detector: str, seen: Progress | None) -> int:
        """Clean steps that end an incident: the configured window, or enough steps for
        `resolve_after_points` observations of a sparsely logged metric, whichever is longer."""
        spacing = seen.spacing if seen is not None else 1.0
        return max(self.config.resolve_after(detector), math.ceil(spacing * self.config.resolve_after_points))

    @staticmethod
    def open_alert(d: Detection, key: IncidentKey, now: float) -> Alert:
        return Alert(
            run=d.run, attempt=key[1], detector=d.detector, metric=d.metric, state=OPEN,
            severity=Severity(d.severity), start_step=int(d.start_step), end_step=int(d.end_step),
            peak_step=int(d.peak_step), score=None if d.score is None else float(d.score),
            message=d.message, evidence=d.to_dict()["evidence"], opened_at=now, updated_at=now,
        )

    @staticmethod
    def extend(alert: Alert, d: Detection, now: float) -> AlertChange | None:
        severity = Severity(d.severity)
        worse_score = score_rank(d.score) > score_rank(alert.score)
        later = d.end_step > alert.end_step
        earlier = d.start_step < alert.start_step and d.end_step >= alert.start_step
        escalates = severity.rank > alert.severity.rank
        if not (worse_score or later or earlier or escalates):
            return None
        before = alert.severity
        alert.end_step = max(alert.end_step, int(d.end_step))
        alert.start_step = min(alert.start_step, int(d.start_step)) if earlier else alert.start_step
        if worse_score:
            # The message and evidence describe the worst point of the incident.
            alert.score, alert.peak_step = float(d.score), int(d.peak_step)
            alert.message, alert.evidence = d.message, d.to_dict()["evidence"]
        if escalates:
            alert.severity = severity
        alert.updated_at = now
        if escalates:
            return AlertChange(ChangeKind.ESCALATED, alert, previous_severity=before)
        return AlertChange(ChangeKind.EXTENDED, alert)

    @staticmethod
    def _resolve(alert: Alert, now: float) -> AlertChange:
        alert.state, alert.resolved_at, alert.updated_at = RESOLVED, now, now
        return AlertChange(ChangeKind.RESOLVED, alert)
