"""Incident logic: detections and clean verdicts in, alert changes out. Pure: no database, no clock.

An incident is one problem on one run: the detections of one story (each detector declares the story
a finding tells, monitor/detectors/base.py `role`) are one incident while it lasts, whichever
detector saw them. Each detector's findings on one metric are a *member* of the incident; the most
specific explanation among them names it (memorization absorbs "train loss below the reference").

Hysteresis: an incident opens on a detection and resolves only on evidence that its condition is
gone, member by member, by the rule its detector declares (schema.CleanRule):
* a detector that judges every step it reads (spikes, NaN, stalls) shows it by steps judged past its
  last flagged one: `resolve_after_steps`, and `resolve_after_points` observations of a sparse metric;
* a detector whose units may be inconclusive (windows, checkpoints) shows it only by its own clean
  verdicts (an equivalence test that passed), `resolve_after_points` of them after its last flagged
  unit. An inconclusive unit extends nothing and resolves nothing.
A member whose detector never says clean keeps its incident open: silence is not evidence.

The person is told when an incident opens, when it escalates (its severity rises, or its size, the
naming finding's score, doubles since they were last told: at most `max_growth_escalations` times),
when a more specific explanation renames it (`updated`), and when it resolves. A recurrence within
`cooldown_steps` of a resolution opens nothing, unless it is larger than what the person was told
(it would have escalated the incident), nor does a finding of steps a resolved incident covered.
Feeding the same detections twice changes nothing, so a restarted service that sees detections
again sends nothing new.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from monitor.alerting.config import IncidentConfig
from monitor.detectors import role_of
from monitor.schema import DOWNSTREAM_PREFIX, Clean, CleanRule, Detection, Severity

OPEN = "open"
RESOLVED = "resolved"


class ChangeKind(enum.StrEnum):
    """What a change does to an alert (the state an alert is in is OPEN or RESOLVED above)."""

    OPENED = "opened"
    EXTENDED = "extended"
    """Quiet: the row is updated, nobody is notified."""
    ESCALATED = "escalated"
    UPDATED = "updated"
    """A more specific explanation now names the incident."""
    RESOLVED = "resolved"


NOTIFYING = (ChangeKind.OPENED, ChangeKind.ESCALATED, ChangeKind.UPDATED, ChangeKind.RESOLVED)

IncidentKey = tuple[str, str]
"""(run, story): at most one incident of a story is open on a run at a time."""


@dataclass(frozen=True)
class Progress:
    """How far the detectors have judged one metric of a run, and how densely it is logged."""

    last_step: int
    spacing: float = 1.0
    """Typical steps between two logged values (1 for train loss, 1,000 for a periodic eval)."""


@dataclass
class Member:
    """One detector's findings on one metric within an incident, and the evidence that they ended."""

    detector: str
    metric: str
    explanation: str
    specificity: int
    clean_rule: str
    severity: str
    score: float | None
    start_step: int
    end_step: int
    peak_step: int
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    clean_steps: list[int] = field(default_factory=list)
    """First steps of the clean verdicts after `end_step` (CLEAN_VERDICTS members)."""
    yields_to: str | None = None
    """The story that takes this member when it holds on the run (StoryRole.yields_to)."""

    @property
    def key(self) -> str:
        return f"{self.detector}|{self.metric}"


@dataclass
class Alert:
    """One incident, as the `alerts` table holds it. `detector`, `metric`, `message` and `evidence`
    are those of the member that names it."""

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
    story: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    told_score: float | None = None
    """The naming finding's score when the person was last told (growth escalations double it)."""
    growth_escalations: int = 0
    lasted_told: bool = False
    """The person was told once that this incident goes on (IncidentConfig.escalate_after_steps)."""
    episode: int | None = None
    """1 for the first incident of its story on its run, 2 for the next one after that resolved...
    Part of `incident_id`; None for an alert stored before incidents were numbered."""
    detections: list[Detection] = field(default_factory=list, repr=False, compare=False)
    """The detections this incident absorbed in this process (for listings; not stored)."""

    @property
    def key(self) -> IncidentKey:
        return (self.run, self.story or self.detector)

    @property
    def incident_id(self) -> str:
        if self.episode is None:
            return f"{self.run}:{self.key[1]}@{self.start_step}"
        return incident_id(self.run, self.key[1], self.episode)

    @property
    def name(self) -> str:
        """The most specific explanation of the story that holds."""
        member = self.members.get(f"{self.detector}|{self.metric}")
        return member.explanation if member is not None else self.detector

    def members_to_dict(self) -> dict[str, Any]:
        return {"told_score": self.told_score, "growth_escalations": self.growth_escalations,
                "lasted_told": self.lasted_told,
                "episode": self.episode, "members": {k: asdict(m) for k, m in self.members.items()}}

    def members_from_dict(self, data: dict[str, Any]) -> None:
        self.told_score = data.get("told_score")
        self.growth_escalations = int(data.get("growth_escalations", 0))
        self.lasted_told = bool(data.get("lasted_told", False))
        episode = data.get("episode")
        self.episode = int(episode) if episode is not None else None
        self.members = {k: Member(**m) for k, m in data.get("members", {}).items()}


@dataclass
class AlertChange:
    kind: ChangeKind
    alert: Alert
    """The alert itself (shared by every change to it in one batch, so it holds the final state)."""
    previous_severity: Severity | None = None
    """For ESCALATED: the severity it had before."""
    reason: str = ""
    """For ESCALATED and UPDATED: what changed, in words."""


def incident_id(run: str, story: str, episode: int) -> str:
    """An incident's id, derived from what defines it rather than from a database row, so the
    watch service (alerts, webhook and Slack payloads) and a whole-run grouping (`gapwatch
    detect`, the report) name the same incident alike: its run, its story and its episode, the
    count of incidents of that story on that run so far (one is open at a time). Not a step: which
    finding opens an incident depends on the order in which pieces of a run arrive, while the
    episodes, and so their count, do not (tests/monitor/watch/test_live_equals_offline.py)."""
    return f"{run}:{story}#{int(episode)}"


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
        cleans: Iterable[Clean] = (),
    ) -> list[AlertChange]:
        """The changes that `detections`, the clean verdicts `cleans` and the progress of each
        metric make to the alerts, taken in step order.

        open_alerts / last_resolved: the open alert and the most recently resolved one per key (both
        are updated in place to the state after the changes). progress: how far the detectors have
        judged each (run, metric), with (run, None) as the run-wide fallback.
        """
        changes: list[AlertChange] = []
        # In the order the watch service learns of them: a finding is known once it first held
        # (a run of windows or checkpoints flags steps logged well before; a whole-run pass sees
        # it only when it has ended).
        events = [(d.known_at, 1, int(d.start_step), i, d) for i, d in enumerate(detections)]
        events += [(int(c.end_step), 0, int(c.start_step), i, c) for i, c in enumerate(cleans)]
        for _, _, _, _, item in sorted(events, key=lambda e: e[:4]):
            if isinstance(item, Detection):
                self._detection(item, open_alerts, last_resolved, progress, now, changes)
            else:
                self._clean(item, open_alerts, last_resolved, progress, now, changes)
        for key, alert in list(open_alerts.items()):
            if self.settled(alert, progress):
                changes.append(self._resolve(alert, now))
                last_resolved[key] = open_alerts.pop(key)
        return changes

    # --- one detection, one clean verdict --------------------------------------------------------
    def _detection(self, d: Detection, open_alerts, last_resolved, progress, now, changes) -> None:
        key = self._key_for(d, open_alerts)
        alert = open_alerts.get(key)
        if (alert is not None and not self.continues(alert, d, progress)
                and self.settled(alert, progress, before=d.known_at)):
            # Every member showed its condition gone before this detection: that incident is over.
            changes.append(self._resolve(alert, now))
            last_resolved[key] = open_alerts.pop(key)
            alert = None
        if alert is not None:
            changes.extend(self.extend(alert, d, now))
            return
        previous = last_resolved.get(key)
        if previous is not None and self.within_cooldown(previous, d):
            # Already reported (seen again after a restart) or a recurrence inside the cool-down.
            previous.detections.append(d)
            return
        alert = self.open_alert(d, key, now)
        alert.episode = (previous.episode or 0) + 1 if previous is not None else 1
        open_alerts[key] = alert
        changes.append(AlertChange(ChangeKind.OPENED, alert))

    @staticmethod
    def _key_for(d: Detection, open_alerts: dict[IncidentKey, Alert]) -> IncidentKey:
        """The incident `d` joins. Its own story's, as a rule; but a finding that yields to
        another story (StoryRole.yields_to) joins that story's open incident on the run, and an
        open incident made only of findings that yield to `d`'s story becomes that story's (the
        same incident, renamed by `d`), so one problem stays one incident."""
        role = role_of(d)
        own = (d.run, role.story)
        if own in open_alerts:
            return own
        if role.yields_to is not None and (d.run, role.yields_to) in open_alerts:
            return (d.run, role.yields_to)
        for key, alert in list(open_alerts.items()):
            if (alert.run == d.run and alert.members
                    and all(m.yields_to == role.story for m in alert.members.values())):
                alert.story = role.story
                open_alerts[own] = open_alerts.pop(key)
                break
        return own

    def _clean(self, c: Clean, open_alerts, last_resolved, progress, now, changes) -> None:
        for key, alert in list(open_alerts.items()):
            member = alert.members.get(f"{c.detector}|{c.metric}")
            if alert.run != c.run or member is None or c.start_step <= member.end_step:
                continue
            if c.start_step in member.clean_steps:
                continue
            member.clean_steps = sorted([*member.clean_steps, int(c.start_step)])[-self.config.resolve_after_points:]
            if self.settled(alert, progress):
                changes.append(self._resolve(alert, now))
                last_resolved[key] = open_alerts.pop(key)
            else:
                alert.updated_at = now
                changes.append(AlertChange(ChangeKind.EXTENDED, alert))  # quiet: the row keeps the evidence

    # --- the rules -------------------------------------------------------------------------------
    def settled(self, alert: Alert, progress: dict, before: int | None = None) -> bool:
        """Every member of `alert` showed its condition gone (by its detector's rule), with what
        was judged before step `before`, when a finding that first held there became known
        (None: everything judged so far)."""
        for member in alert.members.values():
            if member.clean_rule == CleanRule.CLEAN_VERDICTS.value:
                if len([s for s in member.clean_steps if s > member.end_step]) < self.config.resolve_after_points:
                    return False
                continue
            seen = self.progress_of(progress, alert.run, member.metric)
            if seen is None:
                return False
            judged = seen.last_step if before is None else min(seen.last_step, before - 1)
            if judged < member.end_step + self.quiet_window(member.detector, seen):
                return False
        return True

    def continues(self, alert: Alert, d: Detection, progress: dict) -> bool:
        """`d` starts before a quiet window had passed after one of `alert`'s members: the story
        never went quiet, however late `d` is reported (an incremental detector reports a finding
        that goes on as one interval that grows; a whole-run pass learns of it at its end)."""
        for member in alert.members.values():
            seen = self.progress_of(progress, alert.run, member.metric)
            if int(d.start_step) <= member.end_step + self.quiet_window(member.detector, seen):
                return True
        return False

    def within_cooldown(self, previous: Alert, d: Detection) -> bool:
        """`d` adds nothing to tell after `previous` was resolved, so it opens nothing: the same
        finding (detector and metric) recurring inside the cool-down no larger than its member
        grew to, or another detector's finding of steps the previous incident already covered (a
        slower detector confirming the same spike, or a finding judged again after a restart).
        Another detector's finding past those steps is news (a NaN shortly after a spike
        resolved), and so is anything that would have escalated the incident had it still been
        open (a higher severity, or twice the size of its own member: scores of different
        detectors are on different scales), and either opens an incident."""
        if Severity(d.severity).rank > previous.severity.rank:
            return False
        member = previous.members.get(f"{d.detector}|{d.metric}")
        if member is None:
            return int(d.end_step) <= previous.end_step
        if d.end_step > previous.end_step + self.config.cooldown_steps:
            return False
        told = member.score
        return not (told is not None and told > 0 and score_rank(_score(d)) >= 2 * told)

    @staticmethod
    def progress_of(progress: dict, run: str, metric: str) -> Progress | None:
        return progress.get((run, metric), progress.get((run, None)))

    def quiet_window(self, detector: str, seen: Progress | None) -> int:
        """Clean steps that end a member: the configured window, or enough steps for
        `resolve_after_points` observations of a sparsely logged metric, whichever is longer."""
        spacing = seen.spacing if seen is not None else 1.0
        return max(self.config.resolve_after(detector), math.ceil(spacing * self.config.resolve_after_points))

    # --- changes ---------------------------------------------------------------------------------
    def open_alert(self, d: Detection, key: IncidentKey, now: float) -> Alert:
        alert = Alert(
            run=d.run, attempt=int(d.attempt or 0), detector=d.detector, metric=d.metric, state=OPEN,
            severity=Severity(d.severity), start_step=int(d.start_step), end_step=int(d.end_step),
            peak_step=int(d.peak_step), score=_score(d), message=d.message, evidence=d.to_dict()["evidence"],
            opened_at=now, updated_at=now, story=key[1],
        )
        member = _member(d)
        alert.members[member.key] = member
        alert.told_score = member.score
        alert.detections.append(d)
        return alert

    def extend(self, alert: Alert, d: Detection, now: float) -> list[AlertChange]:
        """Fold `d` into the open `alert`: the changes it makes (none when nothing changed)."""
        alert.detections.append(d)
        new = _member(d)
        member = alert.members.get(new.key)
        reached = None
        if member is None:
            reached = _reach(alert, new)
            alert.members[new.key] = member = new
            changed = True
        else:
            changed = _grow(member, new)
        if not changed:
            return []
        before_severity, before_name = alert.severity, alert.name
        alert.start_step = min(alert.start_step, member.start_step)
        alert.end_step = max(alert.end_step, member.end_step)
        alert.severity = max((Severity(m.severity) for m in alert.members.values()), key=lambda s: s.rank)
        alert.severity = max(alert.severity, before_severity, key=lambda s: s.rank)
        self._name(alert)
        alert.updated_at = now
        if alert.severity.rank > before_severity.rank:
            alert.told_score = alert.score
            return [AlertChange(ChangeKind.ESCALATED, alert, before_severity,
                                f"{before_severity.value} -> {alert.severity.value}")]
        if alert.name != before_name:
            alert.told_score = alert.score
            return [AlertChange(ChangeKind.UPDATED, alert, reason=f"now explained as {alert.name} (was {before_name})")]
        told = alert.told_score
        grew = told is not None and told > 0 and score_rank(alert.score) >= 2 * told
        lasted = self._lasted(alert)
        if (grew or reached or lasted) and alert.growth_escalations < self.config.max_growth_escalations:
            alert.growth_escalations += 1
            reason = reached or lasted or f"grew to {alert.score:.3g} times its band (was {told:.3g})"
            alert.lasted_told = alert.lasted_told or reason == lasted
            alert.told_score = alert.score
            return [AlertChange(ChangeKind.ESCALATED, alert, alert.severity, reason)]
        return [AlertChange(ChangeKind.EXTENDED, alert)]

    def _lasted(self, alert: Alert) -> str | None:
        """Why `alert` escalates for its duration, once: it has gone on escalate_after_steps."""
        steps = alert.end_step - alert.start_step
        if alert.lasted_told or steps < self.config.escalate_after_steps:
            return None
        return f"has lasted {steps:,} steps (since step {alert.start_step:,})"

    @staticmethod
    def _name(alert: Alert) -> None:
        """Name the incident by its most specific member; among equally specific ones the one that
        names it keeps it (scores of different detectors are on different scales, so a larger one
        is no better explanation), else the larger finding. Its message, evidence and score speak
        for the incident, with the others' findings attached."""
        top = max(m.specificity for m in alert.members.values())
        current = alert.members.get(f"{alert.detector}|{alert.metric}")
        best = current if current is not None and current.specificity == top else max(
            (m for m in alert.members.values() if m.specificity == top),
            key=lambda m: (score_rank(m.score), -m.start_step))
        alert.detector, alert.metric = best.detector, best.metric
        alert.score, alert.peak_step, alert.message = best.score, best.peak_step, best.message
        # Keyed by explanation; one that several members share (a detector's finding on two
        # metrics) is told apart by metric, so no finding hides another.
        shared = Counter(m.explanation for m in alert.members.values())
        others = {(m.explanation if shared[m.explanation] == 1 else f"{m.explanation} on {m.metric}"): {
                      "detector": m.detector, "metric": m.metric, "steps": [m.start_step, m.end_step],
                      "severity": m.severity, "message": m.message}
                  for m in alert.members.values() if m is not best}
        alert.evidence = {**best.evidence, **({"also": others} if others else {})}

    @staticmethod
    def _resolve(alert: Alert, now: float) -> AlertChange:
        alert.state, alert.resolved_at, alert.updated_at = RESOLVED, now, now
        return AlertChange(ChangeKind.RESOLVED, alert)


def _score(d: Detection) -> float | None:
    return None if d.score is None else float(d.score)


def _member(d: Detection) -> Member:
    role = role_of(d)
    return Member(detector=d.detector, metric=d.metric, explanation=role.explanation, specificity=role.specificity,
                  clean_rule=role.clean_rule.value, severity=Severity(d.severity).value, score=_score(d),
                  start_step=int(d.start_step), end_step=int(d.end_step), peak_step=int(d.peak_step),
                  message=d.message, evidence=d.to_dict()["evidence"], yields_to=role.yields_to)


def _reach(alert: Alert, new: Member) -> str | None:
    """What a new member adds to the incident's reach that a person should hear of: the first
    finding on downstream evals (the fault now shows where the model is used), None otherwise."""
    if new.metric.startswith(DOWNSTREAM_PREFIX) and not any(
            m.metric.startswith(DOWNSTREAM_PREFIX) for m in alert.members.values()):
        return f"reached downstream evals ({new.metric})"
    return None


def _grow(member: Member, new: Member) -> bool:
    """Fold a finding of the same detector and metric into `member`; whether anything changed."""
    worse = score_rank(new.score) > score_rank(member.score)
    later = new.end_step > member.end_step
    earlier = new.start_step < member.start_step
    severer = Severity(new.severity).rank > Severity(member.severity).rank
    if not (worse or later or earlier or severer):
        return False
    member.start_step = min(member.start_step, new.start_step)
    if later:
        member.end_step = new.end_step
        member.clean_steps = [s for s in member.clean_steps if s > member.end_step]
    if worse:
        member.score, member.peak_step, member.message, member.evidence = (new.score, new.peak_step, new.message,
                                                                           new.evidence)
    if severer:
        member.severity = new.severity
    return True
