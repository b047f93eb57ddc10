"""The verdict: named by the most telling detection, or "tied" with the numbers that show it."""

from __future__ import annotations

from monitor.schema import Detection, Severity

from app.report.model import Column, Estimate, Table
from app.report.verdict import decide


def det(detector: str, metric: str = "train/loss", severity=Severity.WARNING, start=900, end=1000,
        message="something happened", **evidence) -> Detection:
    return Detection(run="run", detector=detector, metric=metric, start_step=start, end_step=end,
                     peak_step=(start + end) // 2, score=2.0, severity=severity, message=message,
                     evidence=evidence)


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
    assert "held-out loss within 2 se at 9 of 10 shared checkpoints over 1 sets" in v.sentence
    assert "1 of 2 downstream metrics with error bars differ significantly" in v.sentence
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
    assert "Caveats: 2 spike and throughput incident(s)" in v.sentence


def test_most_severe_then_highest_score_names_the_verdict():
    weak = det("heldout_divergence", metric="eval/heldout/c4/loss", message="c4 moved a little")
    strong = det("heldout_divergence", metric="eval/heldout/wiki/loss", severity=Severity.CRITICAL,
                 message="wiki moved a lot")
    v = decide([weak, strong], tables())
    assert v.kind == "heldout_diverged" and "wiki moved a lot" in v.sentence


def test_no_shared_metric_says_so():
    v = decide([], [])
    assert v.kind == "tied" and "share no compared metric" in v.sentence
