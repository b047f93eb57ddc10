"""Incident logic: one alert per incident, however many detections feed it."""

from __future__ import annotations

from monitor.alerting.config import IncidentConfig
from monitor.alerting.incidents import (
    ChangeKind,
    IncidentTracker,
    Progress,
)
from monitor.schema import Clean, Detection, Severity


def det(start, end, severity=Severity.WARNING, score=1.0, metric="train/loss", detector="nonfinite", run="r",
        attempt=None):
    return Detection(run=run, detector=detector, metric=metric, start_step=start, end_step=end,
                     peak_step=start, score=score, severity=severity, message=f"bad from {start}",
                     evidence={"delta": 0.3, "band": 0.05}, attempt=attempt)


def kinds(changes):
    return [c.kind for c in changes]


def run_tracker(tracker, batches):
    """Feed batches of (detections, last judged step); collect every change."""
    open_alerts, resolved, changes = {}, {}, []
    for detections, last in batches:
        changes += tracker.apply(detections, open_alerts, resolved, {("r", None): Progress(last)}, now=float(last))
    return changes, open_alerts, resolved


def test_long_incident_sends_one_opening_and_one_resolution():
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100, cooldown_steps=500))
    # An incremental detector re-reports the same interval, a little longer, every poll: 5,000 steps.
    batches = [([det(1000, end)], end) for end in range(1000, 6000, 10)]
    batches += [([], step) for step in range(6000, 6200, 10)]
    changes, open_alerts, resolved = run_tracker(tracker, batches)
    notifying = [c for c in changes if c.kind != ChangeKind.EXTENDED]
    assert kinds(notifying) == [ChangeKind.OPENED, ChangeKind.RESOLVED]
    alert = notifying[-1].alert
    assert (alert.start_step, alert.end_step, alert.state) == (1000, 5990, "resolved")
    assert not open_alerts and list(resolved) == [("r", "instability")]


def test_clean_run_opens_nothing():
    tracker = IncidentTracker()
    changes, open_alerts, _ = run_tracker(tracker, [([], step) for step in range(0, 5000, 100)])
    assert changes == [] and open_alerts == {}


def test_same_detections_twice_change_nothing():
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100))
    open_alerts, resolved = {}, {}
    first = tracker.apply([det(10, 50)], open_alerts, resolved, {("r", None): Progress(50)}, now=1.0)
    again = tracker.apply([det(10, 50)], open_alerts, resolved, {("r", None): Progress(50)}, now=2.0)
    assert kinds(first) == [ChangeKind.OPENED] and again == []
    # ...and a resolved incident seen again (a restart replays old detections) stays resolved.
    tracker.apply([], open_alerts, resolved, {("r", None): Progress(500)}, now=3.0)
    assert tracker.apply([det(10, 50)], open_alerts, resolved, {("r", None): Progress(500)}, now=4.0) == []


def test_escalation_notifies_once_and_keeps_the_worst_evidence():
    tracker = IncidentTracker()
    batches = [([det(0, 10, score=1.0)], 10), ([det(0, 20, Severity.CRITICAL, score=5.0)], 20),
               ([det(0, 30, Severity.WARNING, score=2.0)], 30)]
    changes, open_alerts, _ = run_tracker(tracker, batches)
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.ESCALATED, ChangeKind.EXTENDED]
    assert changes[1].previous_severity is Severity.WARNING
    alert = next(iter(open_alerts.values()))
    assert alert.severity is Severity.CRITICAL and alert.score == 5.0 and alert.end_step == 30


def test_recurrence_inside_cooldown_is_quiet_and_after_it_opens_a_new_alert():
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100, cooldown_steps=500))
    batches = [([det(0, 50)], 50), ([], 200),          # opened, then resolved (200 >= 50 + 100)
               ([det(300, 320)], 320), ([], 500),      # recurrence ends within 50 + 500: quiet
               ([det(700, 720)], 720), ([], 900)]      # beyond the cool-down: a new incident
    changes, _, resolved = run_tracker(tracker, batches)
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.RESOLVED, ChangeKind.OPENED, ChangeKind.RESOLVED]
    assert changes[2].alert is not changes[0].alert
    assert changes[2].alert.start_step == 700


def test_a_recurrence_inside_the_cooldown_twice_as_large_or_more_severe_opens_an_incident():
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100, cooldown_steps=500))
    for recurrence in (det(300, 300, score=2.0), det(300, 300, Severity.CRITICAL, score=1.0)):
        batches = [([det(0, 50, score=1.0)], 50), ([], 200), ([recurrence], 320)]
        changes, open_alerts, _ = run_tracker(tracker, batches)
        assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.RESOLVED, ChangeKind.OPENED]
        assert open_alerts[("r", "instability")].episode == 2
    # ...while one a little larger than what was told stays in the resolved incident.
    batches = [([det(0, 50, score=1.0)], 50), ([], 200), ([det(300, 300, score=1.9)], 320)]
    changes, open_alerts, _ = run_tracker(tracker, batches)
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.RESOLVED] and not open_alerts


def test_another_finding_of_the_story_inside_the_cooldown_opens_an_incident():
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100, cooldown_steps=500))
    batches = [([det(0, 50, detector="spike")], 50), ([], 200),  # a spike, resolved
               ([det(300, 300, detector="nonfinite")], 320)]     # a NaN inside the spike's cool-down
    changes, open_alerts, _ = run_tracker(tracker, batches)
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.RESOLVED, ChangeKind.OPENED]
    assert open_alerts[("r", "instability")].detector == "nonfinite"


def test_another_finding_of_steps_a_resolved_incident_covered_opens_nothing():
    """A slower detector confirming a spike told and resolved already, or a finding judged again
    after a restart from an older state, is late evidence of a story told, not a new one; scores
    of two detectors are on different scales, so a spike's larger number is no news either."""
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100, cooldown_steps=500))
    batches = [([det(0, 50, detector="nonfinite", score=20.0)], 50), ([], 200),
               ([det(0, 50, detector="spike", score=60.0, severity=Severity.INFO)], 320),
               ([det(900, 905)], 905), ([], 1100),                   # a later NaN, told and resolved
               ([det(0, 50, detector="spike", score=60.0, severity=Severity.INFO)], 1200)]
    changes, open_alerts, _ = run_tracker(tracker, batches)
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.RESOLVED, ChangeKind.OPENED, ChangeKind.RESOLVED]
    assert not open_alerts
    # ...but the same late finding at a higher severity than the incident was told is news.
    batches = [([det(0, 50, detector="nonfinite", score=20.0)], 50), ([], 200),
               ([det(0, 50, detector="spike", severity=Severity.CRITICAL)], 320)]
    changes, _, _ = run_tracker(tracker, batches)
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.RESOLVED] * 2  # its steps are long judged clean
    assert changes[2].alert.detector == "spike" and changes[2].alert.severity == Severity.CRITICAL


def test_gap_longer_than_the_quiet_window_ends_the_incident():
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100, cooldown_steps=0))
    changes, _, _ = run_tracker(tracker, [([det(0, 50), det(400, 450)], 450)])
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.RESOLVED, ChangeKind.OPENED]


def test_sparse_metric_continues_across_evals_and_needs_two_clean_verdicts():
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=128, resolve_after_points=2))
    open_alerts, resolved, changes = {}, {}, []
    metric = "eval/downstream/hellaswag/acc"
    # flagged, flagged, inconclusive (neither flagged nor clean), clean, flagged again, clean, clean
    verdicts = [(1000, "flag"), (2000, "flag"), (3000, None), (4000, "clean"), (5000, "flag"), (6000, "clean"),
                (7000, None), (8000, "clean")]
    for step, verdict in verdicts:
        progress = {("r", metric): Progress(step, spacing=1000.0)}
        found = [det(step, step, metric=metric, detector="eval_regression")] if verdict == "flag" else []
        cleans = [Clean("r", "eval_regression", metric, step, step)] if verdict == "clean" else []
        changes += tracker.apply(found, open_alerts, resolved, progress, now=float(step), cleans=cleans)
    notifying = [c for c in changes if c.kind != ChangeKind.EXTENDED]
    assert [c.kind for c in notifying] == [ChangeKind.OPENED, ChangeKind.RESOLVED]
    assert notifying[-1].alert.end_step == 5000 and notifying[-1].alert.updated_at == 8000.0


def test_a_fault_across_a_resume_is_one_incident():
    tracker = IncidentTracker()
    changes, open_alerts, _ = run_tracker(tracker, [([det(0, 10, attempt=1), det(5, 20, attempt=2)], 20)])
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.EXTENDED]
    (alert,) = open_alerts.values()
    assert alert.attempt == 1 and alert.end_step == 20


def below(start, end, run="r"):
    """Train loss below the reference: memorization's story unless held-out loss moved too."""
    d = det(start, end, detector="reference_divergence", run=run)
    d.evidence = {"direction": "below", "delta": -0.05}
    return d


def test_train_below_with_heldout_moved_too_is_one_divergence_incident():
    tracker = IncidentTracker()
    heldout = det(3000, 3000, detector="heldout_divergence", metric="eval/heldout/c4/loss")
    changes, open_alerts, _ = run_tracker(tracker, [([below(1000, 2000)], 2000), ([heldout], 3000)])
    notifying = [c for c in changes if c.kind != ChangeKind.EXTENDED]
    assert kinds(notifying) == [ChangeKind.OPENED, ChangeKind.UPDATED]
    (alert,) = open_alerts.values()
    assert alert.story == "divergence" and alert.name == "held-out loss diverged from the reference"
    assert set(open_alerts) == {("r", "divergence")} and notifying[0].alert is alert


def test_train_below_alone_or_with_memorization_stays_memorization():
    tracker = IncidentTracker()
    memorization = det(3000, 3000, detector="memorization")
    changes, open_alerts, _ = run_tracker(tracker, [([below(1000, 2000)], 2000), ([memorization], 3000)])
    (alert,) = open_alerts.values()
    assert alert.story == "memorization" and alert.detector == "memorization"
    # A held-out divergence on another run takes nothing from this one.
    other = det(3000, 3000, detector="heldout_divergence", metric="eval/heldout/c4/loss", run="other")
    tracker.apply([other], open_alerts, {}, {("other", None): Progress(3000)}, now=3.0)
    assert open_alerts[("r", "memorization")] is alert and ("other", "divergence") in open_alerts


def test_train_below_joins_an_open_divergence_incident():
    tracker = IncidentTracker()
    heldout = det(1000, 1000, detector="heldout_divergence", metric="eval/heldout/c4/loss")
    changes, open_alerts, _ = run_tracker(tracker, [([heldout], 1000), ([below(1500, 2500)], 2500)])
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.EXTENDED]
    assert list(open_alerts) == [("r", "divergence")]


def test_an_incident_that_reaches_downstream_evals_escalates_once():
    tracker = IncidentTracker()
    evals = "eval/downstream/hellaswag/acc"
    batches = [([det(1000, 2000, detector="heldout_divergence", metric="eval/heldout/c4/loss")], 2000),
               ([det(4000, 4000, detector="eval_regression", metric=evals)], 4000),
               ([det(5000, 5000, detector="eval_regression", metric="eval/downstream/arc_easy/acc")], 5000)]
    changes, open_alerts, _ = run_tracker(tracker, batches)
    told = [(c.kind, c.reason) for c in changes if c.kind != ChangeKind.EXTENDED]
    assert told[-1] == (ChangeKind.ESCALATED, f"reached downstream evals ({evals})")
    assert [k for k, _ in told].count(ChangeKind.ESCALATED) == 1
    assert list(open_alerts) == [("r", "divergence")]


def test_an_incident_that_goes_on_escalates_once_for_its_duration():
    tracker = IncidentTracker(IncidentConfig(escalate_after_steps=5000))
    # One finding that grows poll by poll for 12,000 steps, its score unchanged.
    batches = [([det(1000, end)], end) for end in range(1000, 13_000, 500)]
    changes, open_alerts, _ = run_tracker(tracker, batches)
    told = [(c.kind, c.reason) for c in changes if c.kind != ChangeKind.EXTENDED]
    assert told == [(ChangeKind.OPENED, ""), (ChangeKind.ESCALATED, "has lasted 5,000 steps (since step 1,000)")]
    (alert,) = open_alerts.values()
    assert alert.lasted_told and alert.growth_escalations == 1


def test_an_equally_specific_finding_joins_without_renaming_and_a_more_specific_one_renames():
    """Grad norm that climbs, then spikes of its own: both explanations are equally specific, so the
    incident keeps the name it was told under, however large the spikes' z-score (a score on
    another scale); a NaN, more specific, renames it once."""
    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100))
    growth = det(1000, 1500, score=1.5, metric="train/grad_norm", detector="grad_norm_growth")
    spike = det(1200, 1200, score=12.6, metric="train/grad_norm", detector="spike")
    nan = det(1400, 1400, severity=Severity.CRITICAL, metric="train/loss", detector="nonfinite")
    changes, open_alerts, _ = run_tracker(tracker, [([growth], 1100), ([spike], 1200)])
    (alert,) = open_alerts.values()
    assert kinds(changes) == [ChangeKind.OPENED, ChangeKind.EXTENDED]
    assert alert.name == "grad norm grows" and "train/grad_norm spikes" in alert.evidence["also"]
    changes, open_alerts, _ = run_tracker(tracker, [([growth], 1100), ([spike], 1200), ([nan], 1400)])
    assert kinds(changes)[-1] == ChangeKind.ESCALATED  # critical, and now named for the NaN
    assert open_alerts[("r", "instability")].name == "NaN or Inf in the run"


def test_one_detector_on_several_metrics_keeps_every_finding_in_the_evidence():
    """The data-loader check breaks on the cursor, the epoch and the coverage at once: one incident,
    and each metric's finding is attached under its own name (one explanation shared by three
    findings must not keep only the last), and the one-line summary says what each found."""
    from app.findings import also

    tracker = IncidentTracker(IncidentConfig(resolve_after_steps=100))
    found = [det(1, 200, Severity.CRITICAL, score=3000.0, metric="data/cursor", detector="data_invariants"),
             det(5, 200, metric="data/epoch", detector="data_invariants"),
             det(42, 200, metric="data/unique_fraction", detector="data_invariants")]
    _, open_alerts, _ = run_tracker(tracker, [(found, 200)])
    (alert,) = open_alerts.values()
    attached = alert.evidence["also"]
    assert sorted(v["metric"] for v in attached.values()) == ["data/epoch", "data/unique_fraction"]
    assert all(k.endswith(f" on {v['metric']}") for k, v in attached.items())
    assert also(alert) == "; also: bad from 5; bad from 42"
