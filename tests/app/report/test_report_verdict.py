"""The verdict: named by the most telling detection, "tied" with the numbers that show it when a
test showed the run alike to its reference, else "undecided" with why."""

from __future__ import annotations

from monitor.alerting.grouping import Progress, group
from monitor.schema import Clean, Detection, NotJudged, Severity

from app.report.model import Column, Estimate, Table
from app.report import verdict


def det(detector: str, metric: str = "train/loss", severity=Severity.WARNING, start=900, end=1000,
        message="something happened", **evidence) -> Detection:
    return Detection(run="run", detector=detector, metric=metric, start_step=start, end_step=end,
                     peak_step=(start + end) // 2, score=2.0, severity=severity, message=message,
                     evidence=evidence)


def decide(detections, tables_, cleans=None, not_judged=()):
    """The verdict, by default with a clean verdict of the train-loss comparison behind a tie."""
    if cleans is None:
        cleans = [Clean("run", "reference_divergence", "train/loss", 1, 1000, reference="ref")]
    return verdict.decide(detections, tables_, cleans=cleans, not_judged=list(not_judged))


def tables() -> list[Table]:
    train = Table("train_delta", "train", [Column("delta", "d")], rows=[
        {"window": "1–500", "delta": Estimate(0.004, 0.003)},
        {"window": "501–1,000", "delta": Estimate(-0.006, 0.003)},
    ])
    heldout = Table("heldout", "held-out", [Column("set", "set"), Column("at_1000", "Δ at step 1,000"),
                                            Column("tied", "within 2 se")],
                    rows=[{"set": "c4", "at_1000": Estimate(-0.004, 0.006), "tied": "9/10"}])
    downstream = Table("downstream", "downstream", [Column("task", "task")], rows=[
        {"task": "hellaswag", "delta": Estimate(0.01, 0.02), "better": "", "significant": False,
         "significant_estimated": False},
        {"task": "piqa", "delta": Estimate(0.04, 0.01), "better": "run", "significant": True,
         "significant_estimated": False},
    ])
    return [train, heldout, downstream]


def test_tied_when_nothing_fired_says_how_close():
    v = decide([], tables())
    assert v.kind == "tied" and v.severity == "info"
    assert v.sentence.startswith("Tied with the reference: no divergence")
    assert "train loss within 0.006 of the reference in every one of 2 windows" in v.sentence
    one = tables()
    one[0].rows = one[0].rows[:1]
    assert "of the reference in its one window" in decide([], one).sentence
    assert "held-out loss within 2 se at 9 of 10 shared checkpoints over 1 set," in v.sentence
    assert ("1 of 2 downstream metrics with error bars differ significantly (the run better on 1, the reference "
            "on 0)") in v.sentence
    assert "held-out c4 Δ at step 1,000: −0.0040 ± 0.0060" in v.evidence


def test_divergence_direction_comes_from_the_evidence():
    v = decide([det("reference_divergence", direction="below", delta=-0.21,
                    message="train/loss 0.210 below the reference")], tables())
    assert v.kind == "diverged_below"
    assert v.headline == "Diverged below the reference"
    assert "0.210 below the reference (train/loss, steps 900–1,000)" in v.sentence
    assert "direction = below" in v.evidence and "delta = -0.21" in v.evidence
    above = decide([det("reference_divergence", delta=0.1)], tables())
    assert above.kind == "diverged_above"


def test_memorization_outranks_divergence_and_data_outranks_memorization():
    found = [det("reference_divergence", direction="below"), det("memorization", severity=Severity.CRITICAL)]
    v = decide(found, tables())
    assert v.kind == "memorization_suspected" and v.severity == "critical"
    assert "Also diverged below the reference (train/loss, from step 900)." in v.sentence
    # Its evidence names the other finding by its explanation, not by its detector.
    assert "train loss below the reference (train/loss): something happened (steps 900–1,000)" in v.evidence
    found.append(det("data_invariants", metric="data/cursor", start=1, end=1, message="cursor advanced 32 batches"))
    v = decide(found, tables())
    assert v.kind == "data_loader_invariant_broken"
    assert v.sentence.startswith("Data-loader invariant broken: cursor advanced 32 batches (data/cursor, at step 1).")
    assert [d.detector for d in v.detections] == ["data_invariants", "memorization", "reference_divergence"]


def test_nonfinite_first_and_resume_before_divergence():
    assert decide([det("resume", metric="event/resume"), det("reference_divergence")], tables()).kind == \
        "resume_inconsistent"
    assert decide([det("nonfinite"), det("data_invariants")], tables()).kind == "nonfinite"


def test_info_findings_and_caveats_leave_the_verdict_tied():
    found = [det("reference_divergence", severity=Severity.INFO), det("spike", metric="train/grad_norm"),
             det("throughput", metric="perf/step_time_s"),
             det("throughput", metric="perf/step_time_s", start=1010, end=1010)]  # the same incident
    v = decide(found, tables())
    assert v.kind == "tied_with_caveats" and v.severity == "warning"
    assert "Caveats: 2 incident(s) (steps slowed down or stalled; train/grad_norm spikes), listed below." in v.sentence


def test_most_severe_then_highest_score_names_the_verdict():
    weak = det("heldout_divergence", metric="eval/heldout/c4/loss", message="c4 moved a little")
    strong = det("heldout_divergence", metric="eval/heldout/wiki/loss", severity=Severity.CRITICAL,
                 message="wiki moved a lot")
    v = decide([weak, strong], tables())
    assert v.kind == "heldout_diverged" and "wiki moved a lot" in v.sentence


def test_undecided_when_no_test_showed_the_runs_alike():
    # A run 1.6 nats above its reference whose comparison could not be judged (too few windows) is
    # never called tied: the verdict says why nothing decided, with the tables' numbers.
    train = Table("train_delta", "train", [Column("delta", "d")], rows=[
        {"window": "0–18", "delta": Estimate(0.278, 0.10)}, {"window": "38–56", "delta": Estimate(1.603, 0.55)}])
    why = [NotJudged("reference_divergence", "1 complete window(s) of 100 steps; a verdict needs 3", "train/loss"),
           NotJudged("memorization", "the run logs no held-out loss", "train/loss"),
           NotJudged("heldout_divergence", "the run logs no held-out loss"),
           NotJudged("spike", "only 150 logged values", "train/loss")]  # not a comparison
    v = decide([det("spike", severity=Severity.WARNING)], [train], cleans=[], not_judged=why)
    assert v.kind == "undecided" and v.severity == "warning" and v.headline == "Undecided"
    assert v.sentence.startswith("Undecided: no finding, but no test showed the run alike to the reference "
                                 "either: train loss against the reference not judged (1 complete window(s) of 100 steps")
    # What was not judged is said in words, never by a detector's name.
    assert "memorization against the reference not judged" in v.sentence
    assert "held-out loss against the reference not judged" in v.sentence
    assert "spikes not judged" not in v.sentence and "reference_divergence" not in v.sentence and "Caveats: 1 incident(s) (loss spikes)" in v.sentence
    assert "train loss within 1.603 of the reference in every one of 2 windows" in v.sentence
    # Clean verdicts of the run alone, or one-sided ones ("not worse"), show nothing alike.
    assert decide([], [train], cleans=[Clean("run", "spike", "train/loss", 1, 150)]).kind == "undecided"
    not_worse = Clean("run", "eval_regression", "eval/downstream/piqa/acc", 1000, 1000)
    assert decide([], [train], cleans=[not_worse]).kind == "undecided"
    # With a comparison shown alike, the tie stands and names what was not judged.
    tied = decide([], [train], not_judged=why[1:])
    assert tied.kind == "tied" and "Not judged: held-out loss against the reference, memorization against the reference (see Not judged)." in tied.sentence


def test_no_shared_metric_is_undecided():
    v = decide([], [], cleans=[])
    assert v.kind == "undecided" and v.sentence == "Undecided: no finding, but no test showed the run alike to the reference either."


def test_a_resolved_finding_names_no_verdict_and_is_listed_as_resolved():
    early = det("reference_divergence", start=100, end=400, direction="above", delta=0.2)
    alike = [Clean("run", "reference_divergence", "train/loss", s, s + 99, reference="ref") for s in (500, 600)]
    (incident,) = group([early], cleans=alike)
    assert incident.resolved
    v = verdict.decide([early], tables(), cleans=alike, not_judged=[], incidents=[incident])
    assert v.kind == "tied" and "no divergence, memorization, data or resume finding open" in v.sentence
    assert v.sentence.endswith("Resolved: train loss above the reference (steps 100–400, shown gone after).")
    # Still open, the same finding names the verdict.
    assert verdict.decide([early], tables(), cleans=alike[:1], not_judged=[]).kind == "diverged_above"


def test_a_transient_fault_that_passed_still_names_the_verdict():
    nan = det("nonfinite", severity=Severity.CRITICAL, start=120, end=120, message="train/loss logged nan")
    (incident,) = group([nan], {("run", "train/loss"): Progress(5000)})
    assert incident.resolved  # thousands of finite steps since
    v = verdict.decide([nan], tables(), cleans=[], not_judged=[], incidents=[incident])
    assert v.severity == "critical" and "Resolved" not in v.sentence
