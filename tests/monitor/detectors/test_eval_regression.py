"""Downstream-eval regressions: per task (two-proportion z), over all tasks, within the run;
silent on noise of the same size the error bars predict."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.detectors.eval_regression import EvalRegression
from monitor.schema import DOWNSTREAM_PREFIX, Severity, downstream_key

from .synth import downstream, run

STEPS = np.arange(1, 20_001)
TASKS = ("hellaswag", "arc_easy", "piqa", "boolq", "winogrande", "openbookqa", "arc_challenge", "mmlu")


def evals(seed, delta=0.0, tasks=TASKS[:4], n=2000, from_step=0):
    frame = downstream(STEPS, 1000, seed, tasks=tasks, n=n)
    acc = [c for c in frame if not c.endswith("/n")]
    frame.loc[frame.index >= from_step, acc] += delta
    return frame


def test_silent_on_binomial_noise():
    for seed in range(3):
        assert EvalRegression().detect(run("r", evals(seed)), run("ref", evals(seed + 10))) == []


def test_one_task_regressing_fires_with_its_z():
    ours = evals(1)
    key = downstream_key("hellaswag", "acc")
    ours.loc[ours.index >= 12_000, key] -= 0.08
    found = EvalRegression(within_run=False).detect(run("r", ours), run("ref", evals(2)))
    (d,) = [f for f in found if f.metric != "eval/downstream/all"]  # the average may follow it
    assert d.metric == key and d.start_step == 12_000 and d.evidence["z"] < d.evidence["z_bound"]
    assert d.evidence["p_value"] < 1e-4 and d.severity == Severity.WARNING


def test_aggregate_catches_a_small_drop_on_every_task():
    # -0.03 on each of 8 tasks of 1,000 items: z about -1.3 per task, -3.8 on average
    found = EvalRegression(within_run=False).detect(
        run("r", evals(1, delta=-0.03, tasks=TASKS, from_step=10_000, n=1000)),
        run("ref", evals(2, tasks=TASKS, n=1000)))
    (agg,) = [d for d in found if d.metric == "eval/downstream/all"]
    assert agg.start_step >= 10_000 and agg.evidence["tasks"] == 8
    assert len(found) - 1 <= 2  # most tasks alone are not significant: the average adds the power


def without_error_bars(frame):
    return frame[[c for c in frame if not c.endswith("/n")]]


def test_aggregate_without_error_bars_uses_the_spread_across_tasks():
    ours = without_error_bars(evals(1, delta=-0.04, tasks=TASKS, from_step=10_000, n=20_000))
    theirs = without_error_bars(evals(2, tasks=TASKS, n=20_000))
    (d,) = EvalRegression(within_run=False).detect(run("r", ours), run("ref", theirs))
    assert d.metric == "eval/downstream/all" and d.evidence["tasks"] == 8
    clean = without_error_bars(evals(1, tasks=TASKS, n=20_000))
    assert EvalRegression(within_run=False).detect(run("r", clean), run("ref", theirs)) == []


def test_lower_is_better_metrics_are_turned():
    bpb = downstream_key("hellaswag", "bpb")
    frame = pd.DataFrame({bpb: np.linspace(1.2, 0.9, 20), bpb + "/stderr": 0.004}, index=np.arange(1, 21) * 1000)
    worse = frame.copy()
    worse.loc[worse.index >= 15_000, bpb] += 0.1
    (d,) = EvalRegression(within_run=False).detect(run("r", worse), run("ref", frame))
    assert d.metric == bpb and d.evidence["lower_is_better"] and d.evidence["delta"] < 0
    assert EvalRegression(within_run=False).detect(run("r", frame), run("ref", worse)) == []  # run better


def test_within_run_regression_since_best():
    frame = evals(1, n=5000)
    key = downstream_key("piqa", "acc")
    frame.loc[frame.index >= 16_000, key] -= 0.1
    (d,) = EvalRegression().detect(run("r", frame))
    assert d.metric == key and d.start_step == 16_000 and d.evidence["best_step"] < 16_000
    assert "regressed" in d.message
    assert EvalRegression().detect(run("r", evals(1, n=5000))) == []


def test_nothing_without_downstream_keys():
    frame = pd.DataFrame({"train/loss": np.ones(10)}, index=np.arange(10))
    assert EvalRegression().detect(run("r", frame), run("ref", frame)) == []
    assert all(not c.startswith(DOWNSTREAM_PREFIX) for c in frame)


def test_checkpoints_shown_not_worse_are_clean_and_alike_ones_name_the_reference():
    detector = EvalRegression(within_run=False)
    key = downstream_key("hellaswag", "acc")
    # 100,000 items a task: a 90% interval of about +-0.7% relative, well inside the 3% floor.
    ours, theirs = evals(1, tasks=TASKS, n=100_000), evals(2, tasks=TASKS, n=100_000)
    cleans = detector.clean(run("r", ours), run("ref", theirs))
    per_task = [c for c in cleans if c.metric == key]
    assert len(per_task) == 20 and all(c.reference == "ref" for c in per_task)
    assert {c.start_step for c in cleans if c.metric == "eval/downstream/all"} == set(range(1000, 20_001, 1000))
    # A task that regressed is not clean while it stays down; far ahead, it is not worse but not alike.
    worse = ours.copy()
    worse.loc[worse.index >= 12_000, key] -= 0.08
    assert max(c.start_step for c in detector.clean(run("r", worse), run("ref", theirs)) if c.metric == key) < 12_000
    ahead = ours.copy()
    ahead.loc[ahead.index >= 12_000, key] += 0.08
    late = [c for c in detector.clean(run("r", ahead), run("ref", theirs)) if c.metric == key and c.start_step >= 12_000]
    assert len(late) == 9 and all(c.reference is None for c in late)


def test_small_eval_sets_show_nothing_alike_at_one_checkpoint():
    # 500 items a task: a 90% interval of about +-9% relative, wider than the 3% floor.
    cleans = EvalRegression(within_run=False).clean(run("r", evals(1, n=500)), run("ref", evals(2, n=500)))
    assert all(c.reference is None for c in cleans)


def test_within_run_clean_until_it_regresses():
    frame = evals(1, n=5000)
    key = downstream_key("piqa", "acc")
    frame.loc[frame.index >= 16_000, key] -= 0.1
    steps = [c.start_step for c in EvalRegression().clean(run("r", frame)) if c.metric == key]
    assert steps and max(steps) < 16_000 and all(c.reference is None for c in EvalRegression().clean(run("r", frame)))


def test_a_regression_that_recovers_resolves_and_one_that_persists_stays_open():
    from monitor.alerting.grouping import group, progress_from_marks

    key = downstream_key("piqa", "acc")
    theirs = evals(2, n=20_000)
    marks = {key: (1000, 20_000, 20), "eval/downstream/all": (1000, 20_000, 20)}
    for recovers in (True, False):
        ours = evals(1, n=20_000)
        ours.loc[(ours.index >= 8_000) & ((ours.index < 12_000) | (not recovers)), key] -= 0.08
        detector = EvalRegression(within_run=False)
        pair = run("r", ours), run("ref", theirs)
        found = [d for d in detector.detect(*pair) if d.metric == key]
        assert [d.start_step for d in found] == [8_000]
        (incident,) = [i for i in group(found, progress_from_marks("r", marks), cleans=detector.clean(*pair))]
        assert incident.resolved is recovers


def test_too_few_evaluations_are_not_judged_and_say_how_many_more_it_needs():
    # One lm-eval results file: one evaluation, nothing to fall from.
    once = evals(1).loc[[1000]]
    (reason,) = EvalRegression().not_judged(run("r", once))
    assert reason.reason.startswith("1 downstream evaluation(s)") and reason.needs == "4 more evaluation(s)"
    assert EvalRegression().detect(run("r", once)) == []
    # Against a reference that evaluated once at the same step: nothing in a row to compare.
    (reason,) = EvalRegression().not_judged(run("r", once), run("ref", evals(2)))
    assert "at steps the reference evaluated too" in reason.reason and reason.needs.startswith("1 more")
    # Enough evaluations, alone or against the reference: judged, nothing to say.
    assert EvalRegression().not_judged(run("r", evals(1).loc[:5000])) == []
    assert EvalRegression().not_judged(run("r", evals(1)), run("ref", evals(2))) == []
