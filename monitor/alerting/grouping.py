"""Detections grouped into incidents by the watch service's rule, for whoever lists findings.

A run judged whole gives one detection per spike, per stall, per flagged window: 260 of them on a
real 20k-step pair, 160 of those the same two-second pause at every evaluation. The watch service
already turns such detections into one alert per incident (monitor/alerting/incidents.py); this
module applies the same tracker to a finished list, so `gapwatch detect`, the report and the
dashboard show what a person would have been alerted about: one row per run x detector x metric x
episode, with how many detections it holds and its worst one.

An episode ends where the tracker resolves an alert (the metric ran clean for its quiet window); a
recurrence inside the cool-down after it, which the watch service sends nothing for, is counted in
the episode it follows. Episodes of one key that recur at a steady period (a burst of slow steps
at every evaluation or checkpoint) are one periodic incident: a list wants one row for them, where
an alert per burst still tells a live watcher that it happened again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from monitor.alerting.config import IncidentConfig
from monitor.alerting.incidents import (
    Alert,
    IncidentKey,
    IncidentTracker,
    Progress,
    incident_key,
    score_rank,
    spacing_of,
)
from monitor.schema import Detection, RunData, Severity

# Episodes of one key are one periodic incident when at least this many recur with every spacing
# within PERIOD_TOLERANCE of their median: the throughput detector's test for periodic pauses
# (its periodic_min_count and period_tolerance), applied to episodes instead of single steps.
PERIODIC_MIN_EPISODES = 5
PERIOD_TOLERANCE = 0.1

Marks = Mapping[str, tuple[int, int, int]]
"""Per metric key of one run: first logged step, last logged step, rows (as the store keeps them)."""


@dataclass
class Incident:
    """The detections of one episode; the worst one speaks for it."""

    detections: list[Detection] = field(default_factory=list)
    episodes: int = 1
    """Episodes folded into this incident (more than one only for a periodic incident)."""
    period_steps: float | None = None
    """Median steps between the starts of a periodic incident's episodes; None if not periodic."""

    @property
    def worst(self) -> Detection:
        """The highest score (the first of a tie), as the tracker keeps an alert's message."""
        return max(self.detections, key=lambda d: score_rank(d.score))

    @property
    def severity(self) -> Severity:
        return max((Severity(d.severity) for d in self.detections), key=lambda s: s.rank)

    @property
    def count(self) -> int:
        return len(self.detections)

    @property
    def start_step(self) -> int:
        return min(int(d.start_step) for d in self.detections)

    @property
    def end_step(self) -> int:
        return max(int(d.end_step) for d in self.detections)

    @property
    def run(self) -> str:
        return self.detections[0].run

    @property
    def detector(self) -> str:
        return self.detections[0].detector

    @property
    def metric(self) -> str:
        return self.detections[0].metric

    def to_dict(self) -> dict:
        """The worst detection's fields, with the episode's severity, steps and count."""
        worst = self.worst.to_dict()
        return {**worst, "severity": self.severity.value, "start_step": self.start_step, "end_step": self.end_step,
                "peak_step": int(self.worst.peak_step), "count": self.count, "episodes": self.episodes,
                "period_steps": self.period_steps}


@dataclass
class _Episode:
    alert: Alert
    """The tracker's view of the episode (its end step decides where the episode ends)."""
    incident: Incident


def group(detections: Iterable[Detection], progress: Mapping[tuple[str, str | None], Progress] | None = None,
          config: IncidentConfig | None = None) -> list[Incident]:
    """The incidents `detections` make, in the order they opened. `progress` gives each (run,
    metric) its logging interval (see `progress_from_marks`); without it every metric counts as
    logged every step."""
    tracker = IncidentTracker(config)
    progress = progress or {}
    opened: dict[IncidentKey, _Episode] = {}
    ended: dict[IncidentKey, _Episode] = {}
    out: list[Incident] = []
    for d in sorted(detections, key=lambda d: (d.start_step, d.end_step)):
        key = incident_key(d)
        episode = opened.get(key)
        gap = tracker.quiet_window(d.detector, tracker.progress_of(progress, d.run, d.metric))
        if episode is not None and tracker.ends_before(episode.alert, d, gap):
            ended[key] = opened.pop(key)
            episode = None
        if episode is not None:
            tracker.extend(episode.alert, d, 0.0)
            episode.incident.detections.append(d)
            continue
        previous = ended.get(key)
        if previous is not None and tracker.within_cooldown(previous.alert, d):
            previous.incident.detections.append(d)
            continue
        episode = _Episode(tracker.open_alert(d, key, 0.0), Incident([d]))
        opened[key] = episode
        out.append(episode.incident)
    return _fold_periodic(out)


def _fold_periodic(incidents: list[Incident]) -> list[Incident]:
    by_key: dict[IncidentKey, list[Incident]] = {}
    for incident in incidents:
        by_key.setdefault(incident_key(incident.detections[0]), []).append(incident)
    out = []
    for same in by_key.values():
        gaps = np.diff([i.start_step for i in same])
        period = float(np.median(gaps)) if gaps.size else 0.0
        if len(same) < PERIODIC_MIN_EPISODES or not np.all(np.abs(gaps - period) <= PERIOD_TOLERANCE * period):
            out.extend(same)
            continue
        out.append(Incident([d for i in same for d in i.detections], episodes=len(same), period_steps=period))
    return sorted(out, key=lambda i: i.start_step)


def most_severe_first(incidents: Iterable[Incident]) -> list[Incident]:
    return sorted(incidents, key=lambda i: (-i.severity.rank, i.start_step, i.detector, i.metric))


def progress_from_marks(run: str, marks: Marks) -> dict[tuple[str, str | None], Progress]:
    """Each metric's last step and typical logging interval, as the watch service tells the tracker."""
    out: dict[tuple[str, str | None], Progress] = {}
    for key, (first, last, rows) in marks.items():
        out[(run, key)] = Progress(int(last), spacing_of(first, last, rows))
    if marks:
        out[(run, None)] = Progress(max(int(last) for _, last, _ in marks.values()))
    return out


def marks_of(run: RunData) -> dict[str, tuple[int, int, int]]:
    """`Marks` of a run held in memory: the finite values of each column."""
    out = {}
    steps = run.scalars.index.to_numpy()
    for column in run.scalars.columns:
        logged = steps[np.isfinite(run.scalars[column].to_numpy(dtype=float))]
        if logged.size:
            out[column] = (int(logged[0]), int(logged[-1]), int(logged.size))
    return out
