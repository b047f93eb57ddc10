"""A report says which of the run's steps its reference covers: a reference that stopped before the
run makes a tie on the steps compared only, said in the verdict and beside the train table; a run
that ends first needs no word; a pair logged at no common step says so, with the steps of each
side, wherever the reason is given."""

from __future__ import annotations

from app.report.build import ReportConfig, build_report
from app.report.inputs import compare

STOPS = "compared on steps 1–900 of the run's 3,000: the reference stops at step 900"
NO_COMMON = ("the runs logged train/loss at no common step: the run at steps 1,001–3,000, the reference at "
             "steps 1–900")


def report(run, reference):
    pair = compare(run, reference)
    return pair, build_report(pair, ReportConfig(with_figures=False))


def test_a_reference_that_stopped_first_ties_only_the_steps_compared(synthetic):
    pair, r = report(synthetic(name="run", seed=1), synthetic(name="ref", seed=2, steps=900))
    v = r.verdict
    assert v.kind.startswith("tied") and v.headline == "Tied with the reference on steps 1–900"
    assert f"of the reference in every one of 8 windows ({STOPS})" in v.sentence
    train = r.table("train_delta")
    assert train.rows[-1]["last_step"] == 900 and train.scope == STOPS
    assert train.note.startswith(STOPS[:1].upper() + STOPS[1:] + ". Δ is the median")
    # The steps the reference never reached are "not judged", not silently clean.
    said = [n.reason for n in pair.not_judged["run"] if n.metric == "train/loss"]
    assert "on steps 901–3,000: the reference stops at step 900" in said


def test_a_finding_on_the_steps_compared_says_what_they_were(synthetic):
    _, r = report(synthetic(name="run", seed=1, train_shift=0.3, shift_from=300), synthetic(name="ref", seed=2, steps=900))
    assert r.verdict.kind == "diverged_above"
    assert "). Compared on steps 1–900 of the run's 3,000: the reference stops at step 900." in r.verdict.sentence


def test_a_run_that_ends_before_its_reference_is_compared_to_its_last_step_without_a_word(synthetic):
    _, r = report(synthetic(name="run", seed=1, steps=900), synthetic(name="ref", seed=2))
    assert r.verdict.headline == "Tied with the reference" and "compared on" not in r.verdict.sentence
    assert r.table("train_delta").scope == "" and not r.table("train_delta").note.startswith("Compared")


def test_a_pair_logged_at_no_common_step_says_so_in_the_verdict_and_the_train_table(synthetic):
    late = synthetic(name="run", seed=1)
    late.scalars = late.scalars.loc[1001:]
    pair, r = report(late, synthetic(name="ref", seed=2, steps=900))
    assert r.verdict.kind == "undecided"
    assert f"train loss against the reference not judged ({NO_COMMON})" in r.verdict.sentence
    assert "logs no train/loss" not in r.verdict.sentence
    assert r.table("train_delta").empty_reason == NO_COMMON
