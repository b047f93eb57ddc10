"""Detections grouped into incidents by the watch service's rule, for whoever lists findings.

A run judged whole gives one detection per spike, per stall, per flagged window or checkpoint. The
watch service turns such detections into one alert per incident (monitor/alerting/incidents.py: one
story on one run, named by its most specific explanation, resolved only on clean evidence); this
module applies the same tracker to a finished list with the run's clean verdicts, so `gapwatch
detect`, the report and the dashboard show what a person would have been alerted about: one row per
incident, with how many detections it holds and the finding that names it.

An episode ends where the tracker resolves an alert; a recurrence inside the cool-down after it,
which the watch service sends nothing for, is counted in the episode it follows. Episodes of one
story and one name that follow each other, five or more of them, are one recurring incident (a
burst of slow steps at every evaluation, loss spikes that come back every few hundred steps in a
noisy run): a list wants one row for a problem that keeps coming back, where an alert per episode
still tells a live watcher that it happened again. When they recur at a steady period the row says
how often.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from monitor.alerting.config import IncidentConfig
from monitor.alerting.incidents import (
    RESOLVED,
    Alert,
    ChangeKind,
    IncidentTracker,
    Progress,
    incident_id,
    score_rank,
    spacing_of,
)
from monitor.schema import Clean, Detection, RunData, SeriesMark, Severity, non_nan_cells

# Consecutive episodes of one story and name are one recurring incident from this many on, and a
# periodic one when every spacing is within PERIOD_TOLERANCE of their median: the throughput
# detector's test for periodic pauses (its periodic_min_count and period_tolerance), applied to
# episodes instead of single steps.
RECURRING_MIN_EPISODES = 5
PERIOD_TOLERANCE = 0.1

T = TypeVar("T")
SeriesMarks = Mapping[str, SeriesMark]
"""Per metric key of one run: first logged step, last logged step, rows (as the store keeps them)."""


@dataclass
class Incident:
    """The detections of one incident; the member that names it speaks for it."""

    detections: list[Detection] = field(default_factory=list)
    episodes: int = 1
    """Episodes folded into this incident (more than one only for a recurring incident)."""
    period_steps: float | None = None
    """Median steps between the starts of a recurring incident's episodes when they recur at a
    steady period; None otherwise."""
    episode_spans: tuple[tuple[int, int], ...] = ()
    """The spans of each episode of a recurring incident (empty: one episode, see `spans`)."""
    alert: Alert | None = None
    """The incident as the watch service's tracker holds it (its story, name and members)."""
    resolved: bool = False
    """The run showed the incident's condition gone (by every member's clean rule)."""

    @property
    def worst(self) -> Detection:
        """The highest score (the first of a tie) among the findings of the member that names the
        alert: its detector on its metric, whose evidence the alert carries. Another metric of the
        same detector is one of the others the alert names after it ("also: ...")."""
        naming = [d for d in self.detections
                  if self.alert is None or (d.detector, d.metric) == (self.alert.detector, self.alert.metric)]
        return max(naming or self.detections, key=lambda d: score_rank(d.score))

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
    def spans(self) -> tuple[tuple[int, int], ...]:
        """Where a timeline draws its bars: the steps each episode's alert was open, and apart from
        them each recurrence inside a cool-down (found again, told to nobody; its_spans)."""
        if self.episode_spans:
            return self.episode_spans
        if self.alert is None:
            return ((self.start_step, self.end_step),)
        return its_spans(self.alert, self.detections)

    @property
    def run(self) -> str:
        return self.detections[0].run

    @property
    def detector(self) -> str:
        return self.alert.detector if self.alert is not None else self.detections[0].detector

    @property
    def metric(self) -> str:
        return self.alert.metric if self.alert is not None else self.detections[0].metric

    @property
    def story(self) -> str:
        return self.alert.story if self.alert is not None else self.detector

    @property
    def name(self) -> str:
        return self.alert.name if self.alert is not None else self.detector

    @property
    def incident_id(self) -> str:
        """The id the watch service gives this incident's alert (incidents.incident_id); a
        recurring incident takes its latest episode's."""
        return self.alert.incident_id if self.alert is not None else incident_id(self.run, self.story, self.episodes)

    @property
    def explanations(self) -> list[str]:
        """Every detector's explanation that joined the incident, the naming one first."""
        if self.alert is None:
            return [self.detector]
        members = sorted(self.alert.members.values(), key=lambda m: -m.specificity)
        return list(dict.fromkeys([self.name, *(m.explanation for m in members)]))

    def to_dict(self) -> dict:
        """The worst detection's fields, with the incident's story, name, severity, steps and count."""
        worst = self.worst.to_dict()
        return {**worst, "severity": self.severity.value, "start_step": self.start_step, "end_step": self.end_step,
                "peak_step": int(self.worst.peak_step), "count": self.count, "episodes": self.episodes,
                "spans": [list(span) for span in self.spans],
                "period_steps": self.period_steps, "incident_id": self.incident_id, "story": self.story, "name": self.name,
                "explanations": self.explanations, "state": "resolved" if self.resolved else "open",
                "evidence": (self.alert.evidence if self.alert is not None else worst["evidence"])}


def group(detections: Iterable[Detection], progress: Mapping[tuple[str, str | None], Progress] | None = None,
          config: IncidentConfig | None = None, cleans: Iterable[Clean] = (), fold: bool = True) -> list[Incident]:
    """The incidents the watch service's tracker makes of `detections` and the clean verdicts
    `cleans`, in the order they opened. `progress` gives each (run, metric) its logging interval
    and last step (see `progress_from_marks`); without it every metric counts as logged every step
    and judged as far as its last detection. `fold=False` keeps each episode of a recurring
    incident apart, as the watch service's alerts are."""
    detections = list(detections)
    progress = dict(progress or {})
    for d in detections:
        seen = progress.get((d.run, None))
        if seen is None or seen.last_step < d.end_step:
            progress[(d.run, None)] = Progress(int(d.end_step))
    tracker = IncidentTracker(config)
    open_alerts: dict = {}
    resolved: dict = {}
    changes = tracker.apply(detections, open_alerts, resolved, progress, 0.0, cleans=cleans)
    opened = [c.alert for c in changes if c.kind == ChangeKind.OPENED]
    out = [Incident(list(a.detections), alert=a, resolved=a.state == RESOLVED) for a in opened]
    return _fold_recurring(out) if fold else out


def its_spans(alert: Alert, detections: Iterable[Detection]) -> tuple[tuple[int, int], ...]:
    """First and last steps of one episode on a timeline: the steps `alert` was open, and each
    stretch of `detections` past them (recurrences inside the cool-down after it resolved) as a
    span of its own, so the clean steps between them are not drawn as the fault. Overlapping or
    touching spans are one."""
    spans = sorted([(int(alert.start_step), int(alert.end_step)),
                    *((int(d.start_step), int(d.end_step)) for d in detections)])
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return tuple(merged)


def recurring_stretches(episodes: Iterable[T], story: Callable[[T], Hashable],
                        name: Callable[[T], str]) -> list[list[T]]:
    """`episodes` (in the order they opened) as the rows of a list: each stretch of consecutive
    episodes of one story that share their name, RECURRING_MIN_EPISODES or more long, is one row
    (a recurring incident); any other episode is a row of its own. An episode of another name
    between them ends a stretch, so a folded row's episodes are numbered one after another and
    the ones it names are its own."""
    by_story: dict[Hashable, list[T]] = {}
    for episode in episodes:
        by_story.setdefault(story(episode), []).append(episode)
    rows: list[list[T]] = []
    for same_story in by_story.values():
        for _, named_alike in itertools.groupby(same_story, key=name):
            stretch = list(named_alike)
            rows.extend([stretch] if len(stretch) >= RECURRING_MIN_EPISODES else [[e] for e in stretch])
    return rows


def _fold_recurring(incidents: list[Incident]) -> list[Incident]:
    rows = recurring_stretches(incidents, lambda i: (i.run, i.story), lambda i: i.name)
    return sorted((row[0] if len(row) == 1 else _folded(row) for row in rows), key=lambda i: i.start_step)


def _folded(same: list[Incident]) -> Incident:
    gaps = np.diff([i.start_step for i in same])
    period = float(np.median(gaps))
    steady = bool(np.all(np.abs(gaps - period) <= PERIOD_TOLERANCE * period))
    return Incident([d for i in same for d in i.detections], episodes=len(same),
                    period_steps=period if steady else None,
                    episode_spans=tuple(span for i in same for span in i.spans), alert=same[-1].alert,
                    resolved=same[-1].resolved)


def most_severe_first(incidents: Iterable[Incident]) -> list[Incident]:
    return sorted(incidents, key=lambda i: (-i.severity.rank, i.start_step, i.detector, i.metric))


def progress_from_marks(run: str, marks: SeriesMarks) -> dict[tuple[str, str | None], Progress]:
    """Each metric's last step and typical logging interval, as the watch service tells the tracker."""
    out: dict[tuple[str, str | None], Progress] = {}
    for key, (first, last, rows) in marks.items():
        out[(run, key)] = Progress(int(last), spacing_of(first, last, rows))
    if marks:
        out[(run, None)] = Progress(max(int(last) for _, last, _ in marks.values()))
    return out


def marks_of(run: RunData) -> dict[str, SeriesMark]:
    """The series marks of a run held in memory: the finite values of each column."""
    out = {}
    steps = run.scalars.index.to_numpy()
    for column in run.scalars.columns:
        at, values = non_nan_cells(run.scalars[column])
        finite = np.isfinite(values)
        if not finite.all():
            at = at[finite]
        if at.size:
            out[column] = SeriesMark(int(steps[at[0]]), int(steps[at[-1]]), int(at.size))
    return out
