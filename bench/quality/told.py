"""What a person on call is told about one injected fault: the incidents the watch service's tracker
makes of a run's detections and clean verdicts, fed in the order it learns of them.

A finding is fed as the incremental engine reports one that goes on: from the step it first held
(`Detection.known_step`), an interval that grows poll by poll (every `grid` steps) to its last. Each step at which a finding or
a clean verdict ends is a poll of its own, so every escalation and rename counts as a notification
of its own: the count is an upper bound on what a coarser poll sends. The run's last step closes
the replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from monitor.alerting.config import IncidentConfig
from monitor.alerting.incidents import Alert, AlertChange, ChangeKind, IncidentTracker, Progress
from monitor.detectors import REGISTRY
from monitor.schema import Clean, CleanRule, Detection


@dataclass
class Told:
    """Notifications of one case, and the incidents open or resolved at its end."""

    opened: int = 0
    escalated: int = 0
    updated: int = 0
    resolved: int = 0
    false_resolutions: int = 0
    """Resolutions of the fault's own story while the fault persisted."""
    names: list[str] = field(default_factory=list)
    """The name of each incident, as it stood at the end."""
    stories: set[str] = field(default_factory=set)
    """Every story an incident was opened for."""
    named_by: list[str] = field(default_factory=list)
    """The detector whose finding names each incident, at the end."""
    resolved_after: int | None = None
    """For a transient fault: steps from its last flagged step to the resolution (None: never)."""

    @property
    def notifications(self) -> int:
        return self.opened + self.escalated + self.updated + self.resolved

    def named_right(self, truth: str | None) -> bool:
        """Every incident told is named by a detector whose own story is the fault's: memorization by
        a memorization detector (not by "train loss below the reference" alone, which is the
        reference-divergence detector's), a worse run by a divergence detector."""
        if truth is None:
            return not self.named_by
        return bool(self.named_by) and all(_own_story(d) == truth for d in self.named_by)


def _own_story(detector: str) -> str | None:
    cls = REGISTRY.get(detector)
    return cls.story.value if cls is not None and cls.story is not None else None


def replay(detections: list[Detection], cleans: list[Clean], run: str, last_step: int, truth: str | None,
           persists_from: int | None, grid: int, concerns: Callable[[Alert], bool] | None = None,
           config: IncidentConfig | None = None) -> Told:
    """Feed the tracker one poll per distinct last step and one every `grid` steps, then the run's
    end. `truth` is the fault's story (None: a clean case); `persists_from` is the step from which
    the fault never goes away (None: a transient fault, or none); `concerns` picks the incidents that
    are about the injected fault (None: all of them), so a real run's own spikes are not counted
    against a fault injected elsewhere in it."""
    tracker = IncidentTracker(config or IncidentConfig())
    polls: dict[int, tuple[list, list]] = {step: ([], []) for step in range(0, last_step, grid)}
    for d in detections:
        # As the incremental engine reports a finding that goes on: from the step it first held
        # (a run of windows or checkpoints is a finding once it has persisted), an interval that
        # grows poll by poll to its end.
        known, end = min(d.known_at, int(d.end_step)), int(d.end_step)
        for upto in sorted({known, *range(known // grid * grid + grid, end, grid), end}):
            polls.setdefault(upto, ([], []))[0].append(
                dataclasses.replace(d, end_step=upto, peak_step=min(int(d.peak_step), upto)))
    for c in cleans:
        polls.setdefault(int(c.end_step), ([], []))[1].append(c)
    open_alerts: dict = {}
    resolved: dict = {}
    changes: list[tuple[int, AlertChange]] = []
    for step in sorted(polls) + [last_step]:
        found, clean = polls.pop(step, ([], []))
        progress = {(run, None): Progress(max(step, 0))}
        changes += [(step, c) for c in tracker.apply(found, open_alerts, resolved, progress, float(step), cleans=clean)]
    # Alerts hold their final state: which incidents concern the fault is decided on it.
    changes = [(step, c) for step, c in changes if concerns is None or concerns(c.alert)]
    told = Told()
    for step, change in changes:
        _count(told, change, step, truth, persists_from)
    incidents = list({id(c.alert): c.alert for _, c in changes}.values())
    told.names = [a.name for a in incidents]
    told.named_by = [a.detector for a in incidents]
    told.stories = {a.story for a in incidents}
    return told


def _count(told: Told, change: AlertChange, step: int, truth: str | None, persists_from: int | None) -> None:
    alert = change.alert
    if change.kind == ChangeKind.OPENED:
        told.opened += 1
    elif change.kind == ChangeKind.ESCALATED:
        told.escalated += 1
    elif change.kind == ChangeKind.UPDATED:
        told.updated += 1
    elif change.kind == ChangeKind.RESOLVED:
        told.resolved += 1
        if persists_from is not None and step >= persists_from:
            told.false_resolutions += 1
        if truth is not None and persists_from is None:
            ends = [m.end_step for m in alert.members.values() if m.clean_rule == CleanRule.JUDGED_STEPS.value]
            told.resolved_after = step - max(ends or [alert.end_step])
