"""The report's tables on synthetic runs whose differences are known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from monitor import schema

from app.report.cells import cell
from app.report.data_table import data_table
from app.report.downstream_table import downstream_table
from app.report.findings_table import not_judged_table
from app.report.heldout_table import heldout_table
from app.report.inputs import compare
from app.report.model import Column, Estimate
from app.report.resume_table import resume_table
from app.report.spike_table import spike_table
from app.report.throughput_table import throughput_table
from app.report.train_table import TrainTableConfig, train_delta_table


def test_train_delta_shows_where_the_run_falls_below(synthetic):
    pair = compare(synthetic(name="run", seed=1, train_shift=-0.2, shift_from=1501),
                   synthetic(name="ref", seed=2))
    table = train_delta_table(pair, TrainTableConfig(windows=6))
    assert len(table.rows) == 6
    early, late = table.rows[:3], table.rows[3:]
    for row in early:
        assert abs(row["delta"].value) < 0.02
    for row in late:
        assert row["delta"].value == pytest.approx(-0.2, abs=0.02)
        assert row["z"] < -10
    # The divergence detector fired on the late windows, and the table says so.
    assert all("train loss below the reference" in row["flagged"] for row in late)
    assert not any("reference_divergence" in row["flagged"] for row in late)  # named, as its incident is
    assert not any(row["flagged"] for row in early)


def test_train_delta_of_two_seeds_is_within_noise(synthetic):
    table = train_delta_table(compare(synthetic(name="run", seed=1), synthetic(name="ref", seed=2)))
    assert len(table.rows) == TrainTableConfig().windows
    for row in table.rows:
        assert abs(row["delta"].value) < 4 * row["delta"].stderr + 1e-9
        assert row["flagged"] == ""
    # Its z is over the within-window error alone, and the table says a finding needs more.
    assert next(c.label for c in table.columns if c.key == "z") == "z (within window)"
    assert "a large z is not one by itself" in table.note


def test_train_delta_names_who_did_not_log_train_loss(synthetic):
    run = synthetic(name="run")
    run.scalars = run.scalars.drop(columns=[schema.TRAIN_LOSS])
    table = train_delta_table(compare(run, synthetic(name="ref", seed=3)))
    assert table.rows == []
    assert table.empty_reason == "train/loss not logged by 'run'"


def test_heldout_tied_runs_with_logged_errors(synthetic):
    table = heldout_table(compare(synthetic(name="run", seed=1), synthetic(name="ref", seed=2)))
    assert [r["set"] for r in table.rows] == ["c4", "wikitext"]
    c4 = table.rows[0]
    shown = [c.key for c in table.columns if c.key.startswith("at_")]
    assert shown == ["at_800", "at_1500", "at_2300", "at_3000"]  # spread over 30 checkpoints, last kept
    final = c4["at_3000"]
    assert final.stderr == pytest.approx(math.hypot(0.003, 0.003))
    assert not final.estimated
    tied, total = map(int, c4["tied"].split("/"))
    assert total == 30 and tied >= 24  # 95% expected within 2 se: 28.5 of 30


def test_heldout_shift_is_measured_and_not_tied(synthetic):
    table = heldout_table(compare(synthetic(name="run", seed=1, heldout_shift=0.05), synthetic(name="ref", seed=2)))
    c4 = table.rows[0]
    assert c4["at_3000"].value == pytest.approx(0.05, abs=0.015)
    assert c4["mean_delta"].value == pytest.approx(0.05, abs=0.003)
    assert c4["tied"] == "0/30"


def test_heldout_error_estimated_from_scatter_when_unlogged(synthetic):
    table = heldout_table(compare(synthetic(name="run", seed=1, heldout_stderr=False),
                                  synthetic(name="ref", seed=2, heldout_stderr=False)))
    e = table.rows[0]["at_3000"]
    assert e.estimated
    # Each curve's per-checkpoint noise is 0.003: the difference's is 0.003 * sqrt 2.
    assert e.stderr == pytest.approx(0.003 * math.sqrt(2), rel=0.35)


def test_downstream_significance_orientation_and_fdr(synthetic):
    pair = compare(synthetic(name="run", seed=1, acc_shift=0.05, bpb_shift=-0.05),
                   synthetic(name="ref", seed=2))
    table = downstream_table(pair)
    rows = {r["task"]: r for r in table.rows}
    assert set(rows) == {"hellaswag", "arc_easy", "piqa"}
    assert rows["hellaswag"]["better"] == "run" and rows["hellaswag"]["significant"]
    # Lower bits per byte is better: the run's −0.05 is a win for the run.
    assert rows["arc_easy"]["better"] == "run" and rows["arc_easy"]["lower_is_better"]
    assert rows["piqa"]["better"] == "" and not rows["piqa"]["significant"]
    assert rows["hellaswag"]["run"].stderr == pytest.approx(0.005)
    assert rows["hellaswag"]["q"] >= rows["hellaswag"]["p"]  # adjusted p is never smaller
    # Rows come most significant first.
    zs = [abs(r["z"]) for r in table.rows]
    assert zs == sorted(zs, reverse=True)


def test_downstream_regression_of_the_run_favours_the_reference(synthetic):
    table = downstream_table(compare(synthetic(name="run", seed=1, acc_shift=-0.05), synthetic(name="ref", seed=2)))
    row = next(r for r in table.rows if r["task"] == "hellaswag")
    assert row["better"] == "reference"
    assert row["delta"].value == pytest.approx(-0.05, abs=0.02)


def test_spike_table_counts_shared_spikes(synthetic):
    pair = compare(synthetic(name="run", seed=1, grad_spikes=(1000, 2000)),
                   synthetic(name="ref", seed=2, grad_spikes=(1000,)))
    table = spike_table(pair)
    row = next(r for r in table.rows if r["run"] == "run" and r["metric"] == schema.TRAIN_GRAD_NORM)
    assert row["peak_steps"] == [1000, 2000]
    assert row["shared"] == "1/2"
    assert 0 < row["max_score"] <= 2 / 1000 + 1e-12
    clean = next(r for r in table.rows if r["run"] == "run" and r["metric"] == schema.TRAIN_LOSS)
    assert clean["spikes"] == 0


def test_a_run_too_short_to_judge_for_spikes_has_no_count_and_no_score(synthetic):
    # The reference logged 120 steps: fewer than the 160 a spike is judged against.
    table = spike_table(compare(synthetic(name="run", seed=1), synthetic(name="ref", seed=2, steps=120)))
    short = next(r for r in table.rows if r["run"] == "ref" and r["metric"] == schema.TRAIN_LOSS)
    assert short["spikes"] is None and short["max_score"] is None and short["final_score"] is None
    assert short["worst"].startswith("not judged: only 120 logged values")
    judged = next(r for r in table.rows if r["run"] == "run" and r["metric"] == schema.TRAIN_LOSS)
    assert judged["spikes"] == 0 and judged["max_score"] == 0.0


def test_the_spike_and_goodput_columns_come_from_the_detectors_that_declare_them(synthetic, monkeypatch):
    from monitor.detectors import REGISTRY
    from monitor.schema import Drawing

    pair = compare(synthetic(name="run", seed=1, grad_spikes=(1000,), stalls=(100,)), synthetic(name="ref", seed=2))
    # The report finds them by what they draw, never by name: without such a detector, each table
    # says so (spikes) or leaves goodput out, and the rest of the table stands.
    monkeypatch.setattr("monitor.detectors.REGISTRY", {
        n: cls for n, cls in REGISTRY.items() if not {Drawing.SPIKE_SCORES, Drawing.GOODPUT} & set(cls.draws)})
    table = spike_table(pair)
    assert table.rows == [] and table.empty_reason == "no detector scores spikes"
    rows = {r["run"]: r for r in throughput_table(pair).rows}
    assert rows["run"]["goodput"] is None and rows["run"]["mfu"] == pytest.approx(0.4, rel=0.01)


def test_resume_table_shows_parity_from_the_detector(synthetic):
    good = {"step": 1500, "kind": "resume", "attempt": 2,
            "payload": {"restored_step": 1500, "restored_data_position": 1500 * 8, "global_batch_size": 8}}
    bad = {"step": 1500, "kind": "resume", "attempt": 2,
           "payload": {"restored_step": 1501, "restored_data_position": 1500 * 8, "global_batch_size": 8}}
    pair = compare(synthetic(name="run", seed=1, events=[bad]), synthetic(name="ref", seed=2, events=[good]))
    table = resume_table(pair)
    rows = {r["run"]: r for r in table.rows}
    assert rows["run"]["flagged"] and "restored the model at step 1501" in rows["run"]["parity"]
    assert rows["ref"]["parity"] == "consistent" and not rows["ref"]["flagged"]
    assert rows["run"]["data_step"] == pytest.approx(1500.0)


def test_resume_table_reports_replayed_steps(synthetic):
    rep = pd.DataFrame({"key": [schema.TRAIN_LOSS] * 4, "step": [10, 10, 11, 11], "attempt": [1, 2, 1, 2],
                        "value": [3.0, 3.0, 2.9, 2.9]})
    pair = compare(synthetic(name="run", seed=1, repeats=rep), synthetic(name="ref", seed=2))
    row = next(r for r in resume_table(pair).rows if r["kind"] == "steps logged twice")
    assert row["parity"] == "2 replayed steps, max |Δ train/loss| = 0"


def test_resume_table_empty_when_nobody_resumed(synthetic):
    table = resume_table(compare(synthetic(name="run", seed=1), synthetic(name="ref", seed=2)))
    assert table.rows == [] and "neither run" in table.empty_reason


def test_data_table_shows_the_double_sharding_signature(synthetic):
    run = synthetic(name="run", seed=1)
    n = len(run.scalars)
    run.scalars[schema.DATA_CURSOR] = run.scalars.index.to_numpy() * 8.0 * 32  # advances 32 batches a step
    for key, value in ((schema.DATA_UNIQUE_FRACTION, 0.63), (schema.DATA_SEEN_ONCE_FRACTION, 0.37),
                       (schema.DATA_SEEN_2PLUS_FRACTION, 0.26), (schema.DATA_EXPECTED_UNIQUE_FRACTION, 1.0)):
        run.scalars[key] = np.full(n, value)
    table = data_table(compare(run, synthetic(name="ref", seed=2)))
    rows = {r["run"]: r for r in table.rows}
    assert rows["run"][schema.DATA_SEEN_2PLUS_FRACTION] == pytest.approx(0.26)
    assert rows["run"]["flagged"] and rows["run"]["finding"]
    assert not rows["ref"]["flagged"] and rows["ref"][schema.DATA_CURSOR] == 3000 * 8


def test_throughput_table_goodput_drops_with_stalls(synthetic):
    pair = compare(synthetic(name="run", seed=1, stalls=tuple(range(100, 3000, 100))),
                   synthetic(name="ref", seed=2))
    rows = {r["run"]: r for r in throughput_table(pair).rows}
    # 29 stalls of 5 s among 3000 steps of 0.5 s: goodput 1500 / (1500 + 29 * 4.5) = 92%.
    assert rows["run"]["goodput"] == pytest.approx(1500 / (1500 + 29 * 4.5), rel=0.01)
    assert rows["ref"]["goodput"] == pytest.approx(1.0, abs=0.005)
    assert rows["run"]["findings"] and rows["ref"]["findings"] == ""
    assert rows["ref"]["mfu"] == pytest.approx(0.4, rel=0.01)


def test_goodput_of_a_run_that_got_faster_is_at_most_one(synthetic):
    # Each block of step times is judged by the ideal of the block before it: a run that sped up
    # beats that ideal, but it lost no time, and no time is never more than all of it.
    run = synthetic(name="run", seed=1)
    times = run.scalars[schema.PERF_STEP_TIME_S]
    run.scalars.loc[run.scalars.index >= 1500, schema.PERF_STEP_TIME_S] = times * 0.7
    rows = {r["run"]: r for r in throughput_table(compare(run, synthetic(name="ref", seed=2))).rows}
    assert rows["run"]["goodput"] == 1.0


def test_estimates_render_with_their_marker():
    col = Column("d", "d", fmt=".4f", signed=True)
    assert cell(Estimate(-0.004, 0.0061), col) == "−0.0040 ± 0.0061"
    assert cell(Estimate(0.003, 0.002, estimated=True), col) == "+0.0030 ± ≈0.0020"
    assert cell(None, col) == "—"
    assert cell(float("nan"), col) == "—"


def test_reference_with_twice_the_batch_is_compared_at_equal_tokens(synthetic):
    # The reference takes half as many steps of twice the tokens; evals every 50 of its steps are
    # the run's every 100 in tokens.
    ref = synthetic(name="ref", seed=2, steps=1500, tokens_per_step=8192, heldout_every=50)
    pair = compare(synthetic(name="run", seed=1), ref)
    assert pair.axis == "tokens"
    train = train_delta_table(pair)
    assert len(train.rows) == TrainTableConfig().windows
    for row in train.rows[1:]:  # the first window holds the steep start, where interpolation is rough
        assert abs(row["delta"].value) < 0.02
    heldout = heldout_table(pair)
    c4 = heldout.rows[0]
    assert c4["checkpoints"] == 30  # every run checkpoint found its reference partner at equal tokens
    assert abs(c4["at_3000"].value) < 4 * c4["at_3000"].stderr


def test_not_judged_says_what_no_detector_could_judge_and_why(synthetic):
    ref = synthetic(name="ref", seed=2)
    ref.scalars = ref.scalars.drop(columns=[c for c in ref.scalars.columns if c.startswith(schema.HELDOUT_PREFIX)])
    table = not_judged_table(compare(synthetic(name="run", seed=1), ref))
    rows = {(r["run"], r["detector"]): r for r in table.rows}
    assert "reference logs no held-out loss" in rows[("run", "memorization")]["reason"]
    # The reference is judged on its own: the detectors that compare two runs are not listed for it.
    assert not any(run == "ref" and d in ("memorization", "reference_divergence") for run, d in rows)
    both_evaluate = not_judged_table(compare(synthetic(name="run", seed=1), synthetic(name="ref", seed=2)))
    assert both_evaluate.rows and not any(r["detector"] == "memorization" for r in both_evaluate.rows)
