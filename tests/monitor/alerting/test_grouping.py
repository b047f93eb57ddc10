"""Detections grouped into incidents by the watch service's rule (monitor/alerting/grouping.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.alerting.config import IncidentConfig
from monitor.alerting.grouping import group, marks_of, most_severe_first, progress_from_marks
from monitor.alerting.incidents import IncidentTracker, Progress
from monitor.schema import Clean, Detection, Severity

from app.findings import headline

from tests.monitor.detectors.synth import run

from .test_incidents import run_tracker

CONFIG = IncidentConfig(resolve_after_steps=100, cooldown_steps=500)


def det(start, end=None, score=1.0, severity=Severity.INFO, detector="spike", metric="train/loss", run="r"):
    return Detection(run=run, detector=detector, metric=metric, start_step=start, end_step=start if end is None else end,
                     peak_step=start, score=score, severity=severity, message=f"at {start} scored {score}",
                     evidence={"lost_s": 2.0})


def test_one_incident_per_episode_with_its_count_and_worst_detection():
    found = [det(1000), det(1050, score=9.0), det(1120, severity=Severity.WARNING),  # gaps under 100: one
             det(1400),  # 280 clean steps later, but inside the 500-step cool-down: counted in the first
             det(5000), det(5010)]  # a new episode
    first, second = group(found, config=CONFIG)
    assert (first.count, first.start_step, first.end_step) == (4, 1000, 1400)
    assert first.worst.start_step == 1050 and first.severity is Severity.WARNING
    # A timeline draws where the alert was open, and the recurrence apart: not the clean steps between.
    assert first.spans == ((1000, 1120), (1400, 1400)) and second.spans == ((5000, 5010),)
    assert (second.count, second.start_step) == (2, 5000)


def test_the_headline_evidence_and_also_speak_for_one_finding():
    """Two metrics of one eval regress (Pythia-160m's LAMBADA: accuracy from step 123k, perplexity
    with a larger z): the incident is named by the finding that opened it, and its message, its
    evidence and the "also" part each speak for that one or for the other, never both for one."""
    acc = det(123_000, 143_000, score=6.4, detector="eval_regression", metric="eval/downstream/lambada/acc")
    ppl = det(123_000, 143_000, score=8.3, detector="eval_regression", metric="eval/downstream/lambada/ppl")
    acc.evidence, ppl.evidence = {"value": 0.31}, {"value": 44.9}
    acc.message, ppl.message = "acc regressed to 0.31", "ppl regressed to 44.9"
    (incident,) = group([acc, ppl], config=CONFIG)
    lead = incident.to_dict()
    assert lead["metric"] == incident.alert.metric
    ours, theirs = (acc, ppl) if lead["metric"] == acc.metric else (ppl, acc)
    assert lead["message"] == ours.message and lead["evidence"]["value"] == ours.evidence["value"]
    (other,) = lead["evidence"]["also"].values()
    assert other["metric"] == theirs.metric
    assert headline(incident) == f"{ours.message}; also: {theirs.message}"


def test_episodes_are_where_the_watch_service_opens_alerts():
    found = [det(s) for s in (10, 40, 300, 900, 960, 2000, 2600, 2650)]
    tracker = IncidentTracker(CONFIG)
    changes, _, _ = run_tracker(tracker, [([d], d.end_step) for d in found] + [([], 4000)])
    opened = [c.alert.start_step for c in changes if c.kind == "opened"]
    assert [i.start_step for i in group(found, config=CONFIG)] == opened == [10, 900, 2000, 2600]


def test_keys_never_mix():
    found = [det(10), det(20, detector="throughput", metric="perf/step_time_s"), det(30, run="other")]
    assert sorted((i.run, i.detector) for i in group(found)) == [("other", "spike"), ("r", "spike"),
                                                                  ("r", "throughput")]


def test_a_sparse_metric_stays_one_episode_across_its_logging_interval():
    evals = [det(s, detector="throughput", metric="perf/step_time_s") for s in range(1000, 4001, 1000)]
    assert len(group(evals, config=CONFIG)) == 4  # as if logged every step: 1,000 clean steps end an episode
    marks = {"perf/step_time_s": (1000, 9000, 9)}  # logged every 1,000 steps
    (one,) = group(evals, progress_from_marks("r", marks), config=CONFIG)
    assert one.count == 4


def test_checkpoints_not_flagged_are_not_clean_without_a_clean_verdict():
    evals = [det(s, detector="eval_regression", metric="eval/downstream/piqa/acc") for s in (1000, 4000)]
    marks = {"eval/downstream/piqa/acc": (1000, 9000, 9)}
    (one,) = group(evals, progress_from_marks("r", marks), config=CONFIG)  # 2,000-3,000 were inconclusive
    assert one.count == 2 and not one.resolved
    cleans = [Clean("r", "eval_regression", "eval/downstream/piqa/acc", s, s) for s in (2000, 3000)]
    first, second = group(evals, progress_from_marks("r", marks), config=CONFIG, cleans=cleans)
    assert first.resolved and (first.start_step, second.start_step) == (1000, 4000)


def test_bursts_at_a_steady_period_are_one_periodic_incident():
    bursts = [det(start + k, detector="throughput", metric="perf/step_time_s")
              for start in range(1000, 20000, 2000) for k in (0, 3, 9)]
    (periodic,) = group(bursts, config=CONFIG)
    assert periodic.count == 30 and periodic.episodes == 10 and periodic.period_steps == 2000
    # Four bursts are too few to fold.
    assert len(group([d for d in bursts if d.start_step < 8000], config=CONFIG)) == 4


def test_episodes_that_keep_coming_back_at_no_period_are_one_recurring_incident():
    # Loss spikes every few hundred to few thousand steps, as a noisy real run has them.
    starts = (1000, 2700, 3400, 5900, 6600, 9500)
    (recurring,) = group([det(s) for s in starts], config=CONFIG)
    assert (recurring.episodes, recurring.count, recurring.period_steps) == (6, 6, None)
    assert (recurring.start_step, recurring.end_step) == (1000, 9500)
    assert recurring.spans == tuple((s, s) for s in starts)  # where a timeline draws its bars
    assert recurring.incident_id == "r:instability#6"  # the latest episode's, as the watch service numbered it
    assert headline(recurring).startswith("6 times in 6 episodes, 12 s lost in all; worst at step 1,000")
    # Another explanation of the story between them (a NaN) ends the stretch: each side is too short.
    nan = det(3000, detector="nonfinite", severity=Severity.CRITICAL)
    listed = group([det(s) for s in starts] + [nan], config=CONFIG)
    assert [(i.name, i.episodes) for i in listed] == [("loss spikes", 1)] * 2 + [("NaN or Inf in the run", 1)] + [
        ("loss spikes", 1)] * 4
    # Ten before it: the ten fold, the NaN stays its own row.
    before = [det(s) for s in range(1000, 30000, 2900)]
    listed = group(before + [det(40000, detector="nonfinite", severity=Severity.CRITICAL)], config=CONFIG)
    assert [(i.name, i.episodes, i.severity) for i in listed] == [("loss spikes", 10, Severity.INFO),
                                                                 ("NaN or Inf in the run", 1, Severity.CRITICAL)]


def test_most_severe_first_and_marks_of_a_run_in_memory():
    found = [det(10), det(5000, severity=Severity.CRITICAL, detector="nonfinite")]
    assert [i.detector for i in most_severe_first(group(found))] == ["nonfinite", "spike"]
    steps = np.arange(1, 1001)
    frame = pd.DataFrame({"train/loss": 3.0, "eval/heldout/c4/loss": np.where(steps % 100 == 0, 3.1, np.nan)},
                         index=pd.Index(steps, name="step"))
    marks = marks_of(run("r", frame))
    assert marks["train/loss"] == (1, 1000, 1000) and marks["eval/heldout/c4/loss"] == (100, 1000, 10)
    assert progress_from_marks("r", marks)[("r", "eval/heldout/c4/loss")] == Progress(1000, 100.0)


def test_a_finding_is_taken_where_it_first_held_as_a_watcher_learns_of_it():
    """A real Muon/AdamW pair's shape: train loss apart from the reference early (windows 1-2,100,
    clean after), held-out loss apart from checkpoint 500 on, first persistent at 1,600 (625 on the
    real pair) and lasting to the end. A watcher joins the held-out finding to the open incident at 1,600; a whole-run pass
    that took it at its last step would first resolve the train finding and open a second incident."""
    def divergence(start, end, known, detector, metric):
        found = det(start, end, score=6.0, severity=Severity.CRITICAL, detector=detector, metric=metric)
        found.evidence, found.known_step = {"direction": "above"}, known
        return found

    def train(end, known=300):
        return divergence(1, end, known, "reference_divergence", "train/loss")

    def heldout(end, known=1600):
        return divergence(500, end, known, "heldout_divergence", "eval/heldout/val/loss")

    cleans = [Clean("r", "reference_divergence", "train/loss", s, s + 99, {"band": 0.05}) for s in (2100, 2200)]
    progress = {("r", None): Progress(20_000)}
    live_batches = [([train(300)], [], 300), ([heldout(1600)], [], 1600), ([train(2099)], [], 2099),
                    ([], cleans, 2299), ([heldout(20_000)], [], 20_000)]
    tracker, open_alerts, resolved, changes = IncidentTracker(CONFIG), {}, {}, []
    for found, clean, last in live_batches:
        changes += tracker.apply(found, open_alerts, resolved, {("r", None): Progress(last)}, float(last), cleans=clean)
    kinds = [c.kind for c in changes]
    assert kinds.count("opened") == 1 and "resolved" not in kinds
    (alert,) = open_alerts.values()

    (whole,) = group([train(2099), heldout(20_000)], progress, CONFIG, cleans=cleans)
    assert (whole.incident_id, whole.name, whole.resolved) == (alert.incident_id, alert.name, False)
    assert whole.name == "held-out loss diverged from the reference"
    # Taken at its last step instead, the same findings tell two stories.
    late = [train(2099, known=None), heldout(20_000, known=None)]
    assert [i.resolved for i in group(late, progress, CONFIG, cleans=cleans)] == [True, False]
