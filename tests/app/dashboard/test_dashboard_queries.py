"""What the dashboard reads: point budgets, ranges, the reference's part, overview health, alerts."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from app import figures
from app.dashboard import layout, panels, queries
from bench.bench_stories import long_rows
from bench.quality import stories
from app.dashboard.routes import ViewSpec
from app.figures.frames import downstream_frame
from monitor.judging.judge import detect_stored, judged_runs
from monitor.schema import TRAIN_GRAD_NORM, TRAIN_LOSS, downstream_key, heldout_key
from monitor.store import open_store
from monitor.watch.run_watcher import state_name, watched_runs

RUN, REFERENCE = "olmo-repro", "olmo-reference"


@pytest.fixture
def both_backends(store_url, demo):
    """The demo run on SQLite and on PostgreSQL (smaller: 1,200 steps)."""
    demo.build(store_url, steps=1200)
    with open_store(store_url, read_only=True) as store:
        yield store


def test_view_is_downsampled_to_the_budget_and_full_resolution_when_zoomed(both_backends):
    store = both_backends
    view = queries.load_view(store, ViewSpec(run=RUN), max_points=500, step_range=None)
    per_key = view.run.long.groupby("key").size()
    assert per_key.max() <= 500 + 1  # the budget, plus the last logged point (live polling goes on from it)
    assert view.run.bucket_width[TRAIN_LOSS] > 1
    assert view.reference is not None and view.reference.name == REFERENCE
    zoom = queries.load_view(store, ViewSpec(run=RUN), max_points=500, step_range=(300, 599))
    loss = zoom.run.long[zoom.run.long["key"] == TRAIN_LOSS]
    assert loss["step"].tolist() == list(range(300, 600))
    assert zoom.run.bucket_width[TRAIN_LOSS] == 1
    assert "full resolution" in panels.resolution_text(zoom)
    ref_loss = zoom.reference.long[zoom.reference.long["key"] == TRAIN_LOSS]
    assert ref_loss["step"].min() == 300 and ref_loss["step"].max() == 599


def test_spikes_survive_downsampling(demo_url):
    with open_store(demo_url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run=RUN), max_points=200, step_range=None)
    grad = view.run.long[view.run.long["key"] == TRAIN_GRAD_NORM]
    assert len(grad) <= 200
    assert grad["value"].max() == pytest.approx(2.0)  # the largest logged spike is drawn


def test_reference_is_read_over_the_runs_x_range_on_a_token_axis(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        store.ensure_run("ref", tokens_per_step=2000)
        store.ensure_run("run", tokens_per_step=1000, reference="ref")
        store.write_metrics("ref", pd.DataFrame({"step": np.arange(1000), "key": TRAIN_LOSS, "value": 3.0}))
        store.write_metrics("run", pd.DataFrame({"step": np.arange(400), "key": TRAIN_LOSS, "value": 3.0}))
    with open_store(url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run="run", axis="tokens"), max_points=2000, step_range=None)
    ref_steps = view.reference.long["step"]
    # The run reached 399 * 1000 tokens; the reference (2,000 a step) got there at step ~200.
    assert ref_steps.max() == 200 and view.axis_kind == "tokens"
    assert view.reference.long["x"].max() == pytest.approx(400_000)


def test_token_axis_falls_back_to_steps_with_a_notice(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        store.ensure_run("run", reference="gone")
        store.write_metrics("run", pd.DataFrame({"step": np.arange(10), "key": TRAIN_LOSS, "value": 3.0}))
    with open_store(url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run="run", axis="tokens"), max_points=2000, step_range=None)
    assert view.axis_kind == "step" and view.reference is None
    assert any("'gone' is not in the store" in n for n in view.notices)
    assert any("neither tokens_per_step nor train/tokens" in n for n in view.notices)


def test_link_range_adds_context_around_the_alert():
    assert queries.link_range(1000, 1200) == (900, 1300)
    assert queries.link_range(5, 5) == (0, 15)
    assert queries.link_range(None, None) is None


def test_overview_health(tmp_path, demo):
    url = f"sqlite:///{tmp_path / 's.db'}"
    demo.build(url, steps=300, alerts=False)
    now = time.time()
    with open_store(url) as store:
        store.ensure_run("quiet", status="running", tokens_per_step=10)
        store.write_metrics("quiet", pd.DataFrame({"step": [0, 1], "key": TRAIN_LOSS, "value": 3.0,
                                                   "wall_time": now - 3600}))
        store.ensure_run("fell-over", status="crashed")
        store.ensure_run("empty")
    with open_store(url, read_only=True) as store:
        rows = queries.overview(store, now=now, stale_after_s=600).set_index("name")
    # No alert ever opened, but a stored detection (as `detect` writes them) is critical.
    assert rows.loc["olmo-repro", "health"] == "had critical"
    assert rows.loc["quiet", "health"] == "stale"
    assert rows.loc["quiet", "tokens"] == 10.0 and rows.loc["quiet", "since_last_s"] == pytest.approx(3600, abs=5)
    assert rows.loc["fell-over", "health"] == "crashed"
    # Nothing ever judged it: no watch service, no stored detect. "ok" would be a claim.
    assert pd.isna(rows.loc["empty", "last_step"]) and rows.loc["empty", "health"] == "not judged"
    with open_store(url) as store:
        for name in ("judged/by detect", "watched"):
            store.ensure_run(name)
            store.write_metrics(name, pd.DataFrame({"step": np.arange(1, 301), "key": TRAIN_LOSS,
                                                    "value": 3.0 + 1.0 / np.arange(1, 301)}))
        detect_stored(store, "judged/by detect")
        store.save_state(state_name("watched"), {})  # as the watch service keeps one per run
        assert "judged/by detect" in judged_runs(store) and watched_runs(store) == {"watched"}
    with open_store(url, read_only=True) as store:
        rows = queries.overview(store, now=now).set_index("name")
    assert rows.loc["judged/by detect", "health"] == "ok" and rows.loc["watched", "health"] == "ok"
    with open_store(url) as store:
        demo.add_alert(store, "quiet", "throughput", "perf/step_time_s", "warning", 0, 1, "slow")
        demo.add_alert(store, "olmo-repro", "spike", TRAIN_LOSS, "critical", 5, 5, "spike", state="resolved")
    with open_store(url, read_only=True) as store:
        rows = queries.overview(store, now=now).set_index("name")
    assert rows.loc["quiet", "health"] == "warning" and rows.loc["quiet", "open_alerts"] == 1
    assert rows.loc["olmo-repro", "health"] == "had critical"  # its alert is resolved
    with open_store(url) as store:
        demo.add_alert(store, "fell-over", "spike", TRAIN_LOSS, "warning", 5, 5, "spike", state="resolved")
        store.ensure_run("resolved-warning", status="finished")
        demo.add_alert(store, "resolved-warning", "spike", TRAIN_LOSS, "warning", 5, 5, "spike", state="resolved")
    with open_store(url, read_only=True) as store:
        rows = queries.overview(store, now=now).set_index("name")
    # Only a critical finding leaves a mark once resolved; a resolved warning reads as ok.
    assert rows.loc["resolved-warning", "health"] == "ok"
    assert rows.loc["fell-over", "health"] == "crashed"


def worse_pair(tmp_path) -> str:
    """A store with a worse run (train and held-out loss above) and its reference, 30,000 steps."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        store.ensure_run("reference")
        store.write_metrics("reference", long_rows(stories.reference(30_000)))
        store.ensure_run("worse", reference="reference")
        store.write_metrics("worse", long_rows(stories.worse(30_000)))
    return url


def test_a_divergence_detect_left_open_is_critical_not_had_critical(tmp_path, capsys):
    """A worse run judged by `detect` alone: its divergence lasts to the run's end, so the runs
    table and `gapwatch runs` say "critical", as `detect` lists the incident "open" ("had critical"
    is for a critical finding that is over)."""
    url = worse_pair(tmp_path)
    assert main(["detect", "--run", "worse", "--store", url, "--json"]) == 0
    (incident,) = json.loads(capsys.readouterr().out)
    assert (incident["severity"], incident["state"]) == ("critical", "open")
    with open_store(url, read_only=True) as store:
        rows = queries.overview(store).set_index("name")
    assert rows.loc["worse", "health"] == "critical"
    assert main(["runs", "--store", url, "--json"]) == 0
    listed = {r["name"]: r["health"] for r in json.loads(capsys.readouterr().out)}
    assert listed["worse"] == "critical" and listed["reference"] == "not judged"


def test_findings_are_alerts_and_the_stored_detections_no_alert_covers(tmp_path, demo):
    url = f"sqlite:///{tmp_path / 's.db'}"
    runs = demo.build(url, steps=300, alerts=False)
    with open_store(url, read_only=True) as store:
        found = queries.findings(store, runs.run)
    # Nothing was alerted: the stored detections are the findings, grouped as the watch service
    # would alert on them (three spikes within one cool-down are one incident), most severe first.
    assert found[["detector", "count"]].values.tolist() == [["reference_divergence", 1], ["spike", 3],
                                                            ["throughput", 1]]
    assert set(found["state"]) == {"found"} and set(found["source"]) == {"detection"}
    assert found["severity"].tolist()[0] == "critical"
    with open_store(url) as store:
        spike = runs.spike_steps[0]
        demo.add_alert(store, runs.run, "spike", TRAIN_GRAD_NORM, "warning", spike - 2, spike + 2, "spike alert")
    with open_store(url, read_only=True) as store:
        found = queries.findings(store, runs.run)
    # The alert is the episode the watch service's tracker makes of the three spikes (its id is
    # theirs): it replaces all three, and the other stories' findings stay.
    assert found.loc[found["source"] == "alert", "message"].tolist() == ["spike alert"]
    assert not len(found[(found["detector"] == "spike") & (found["source"] == "detection")])
    assert found.loc[found["source"] == "detection", "detector"].tolist() == ["reference_divergence", "throughput"]
    assert found["start_step"].dtype == "int64"


def test_alerts_that_keep_coming_back_are_one_row_of_the_list_and_a_bar_each_on_the_timeline(tmp_path, demo):
    url = f"sqlite:///{tmp_path / 's.db'}"
    runs = demo.build(url, steps=300, alerts=False)
    with open_store(url) as store:
        # Six loss-spike episodes the watch service alerted on one by one, a NaN between the fifth
        # and sixth: the first five are one row, the NaN and the sixth their own.
        for n, step in enumerate((10, 40, 70, 100, 130)):
            demo.add_alert(store, runs.run, "spike", TRAIN_LOSS, "critical" if n == 2 else "warning", step, step + 2,
                           f"spike at {step}", state="resolved")
        demo.add_alert(store, runs.run, "nonfinite", TRAIN_LOSS, "critical", 150, 150, "NaN", state="resolved")
        demo.add_alert(store, runs.run, "spike", TRAIN_LOSS, "warning", 200, 202, "spike at 200")
    with open_store(url, read_only=True) as store:
        found = queries.findings(store, runs.run)
    rows = found[found["source"] == "alert"].sort_values("start_step")
    assert rows[["name", "state", "severity", "start_step", "end_step", "count"]].values.tolist() == [
        ["loss spikes", "resolved", "critical", 10, 132, 5],  # the worst episode's severity
        ["NaN or Inf in the run", "resolved", "critical", 150, 150, 1],
        ["loss spikes", "open", "warning", 200, 202, 1]]
    assert rows["message"].iloc[0] == "5 episodes; the latest: spike at 130"
    # The store's own spike detections (steps 90, 172, 255) hold episodes of the same ids on other
    # steps: judged apart from these alerts, they are not drawn as theirs.
    assert rows["spans"].iloc[0] == [[s, s + 2] for s in (10, 40, 70, 100, 130)]
    # The timeline draws a bar for each episode, not one across the clean steps between them.
    figure = figures.alerts_timeline(found)
    bars = sorted(int(b) for trace in figure.data for b in trace.base)
    assert {10, 40, 70, 100, 130, 150, 200} <= set(bars)


def test_a_recurrence_the_watch_service_folded_into_a_cool_down_is_its_alerts_not_a_second_row(tmp_path):
    """A loss spike at step 2,000, resolved, and another at 2,400 inside the cool-down after it: the
    watch service tells nothing of the second (it adds nothing), and the page lists one incident,
    as `detect` does, not the alert beside a "found" row of the same spikes. Its timeline draws
    the second spike where it was, not nothing (nor one bar across the clean steps between)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    steps = np.arange(1, 4001)
    loss = 3.0 + np.random.default_rng(0).normal(0, 0.01, steps.size)
    loss[(steps == 2000) | (steps == 2400)] += 1.0
    with open_store(url) as store:
        store.ensure_run("r")
        store.write_metrics("r", pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": loss}))
    assert main(["watch", "--run", "r", "--store", url, "--once"]) == 0
    with open_store(url, read_only=True) as store:
        assert sorted(d.start_step for d in store.read_detections("r")) == [2000, 2400]
        found = queries.findings(store, "r")
    assert found[["source", "name", "start_step"]].values.tolist() == [["alert", "loss spikes", 2000]]
    assert found["spans"][0] == [[2000, 2000], [2400, 2400]]
    bars = sorted(int(b) for trace in figures.alerts_timeline(found).data for b in trace.base)
    assert bars == [2000, 2400]


def test_one_incident_is_one_row_whatever_detectors_and_metrics_it_holds(tmp_path):
    """A worse run: train and held-out loss both above the reference. The watch service opens one
    divergence incident for both (named by held-out loss); the train-loss findings it holds are
    part of it, not a second row "found" beside it."""
    url = worse_pair(tmp_path)
    assert main(["watch", "--run", "worse", "--store", url, "--once"]) == 0
    with open_store(url, read_only=True) as store:
        stored = {d.detector for d in store.read_detections("worse")}
        found = queries.findings(store, "worse")
    assert stored == {"reference_divergence", "heldout_divergence"}
    assert found[["source", "state"]].values.tolist() == [["alert", "open"]]
    # Its one row says what else it holds, as `detect` does.
    assert found["message"][0].endswith("; also: train loss above the reference"), found["message"][0]


def test_a_stored_finding_the_run_recovered_from_reads_resolved(tmp_path):
    """A downstream eval down for two evaluations, then back level with the reference: `detect`
    calls its incident resolved, and so does the run's page."""
    key = downstream_key("piqa", "acc")
    steps = np.arange(1000, 10_001, 1000)
    rng = np.random.default_rng(3)
    level = 0.6 + rng.normal(0, 0.001, steps.size)
    run = np.where((steps >= 3000) & (steps < 5000), level - 0.1, level)
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        for name, values in (("ref", level), ("run", run)):
            store.ensure_run(name, reference="ref" if name == "run" else None)
            store.write_metrics(name, pd.DataFrame({"step": np.concatenate([steps, steps]),
                                                    "key": [key] * steps.size + [key + "/n"] * steps.size,
                                                    "value": np.concatenate([values, np.full(steps.size, 20_000.0)])}))
        detect_stored(store, "run")
    with open_store(url, read_only=True) as store:
        found = queries.findings(store, "run")
    assert found[["detector", "state"]].values.tolist() == [["eval_regression", "resolved"]]


def test_read_alerts_newest_first(tmp_path, demo):
    url = f"sqlite:///{tmp_path / 's.db'}"
    demo.build(url, steps=300, alerts=False)
    with open_store(url) as store:
        demo.add_alert(store, "olmo-repro", "spike", TRAIN_LOSS, "warning", 10, 10, "first")
        time.sleep(0.01)
        demo.add_alert(store, "olmo-repro", "memorization", TRAIN_LOSS, "critical", 100, 200, "second")
    with open_store(url, read_only=True) as store:
        alerts = store.read_alerts("olmo-repro")
        assert alerts["message"].tolist() == ["second", "first"]
        assert alerts["start_step"].dtype == "int64"
        assert store.read_alerts("olmo-repro", limit=1)["message"].tolist() == ["second"]


def test_new_points_reads_only_after_each_keys_last_step(demo_url):
    with open_store(demo_url, read_only=True) as store:
        rows = queries.new_points(store, RUN, {TRAIN_LOSS: 2990, TRAIN_GRAD_NORM: 2995}, max_points=2000)
    assert rows[rows["key"] == TRAIN_LOSS]["step"].tolist() == list(range(2991, 3000))
    assert rows[rows["key"] == TRAIN_GRAD_NORM]["step"].tolist() == list(range(2996, 3000))


def test_every_downstream_metric_offered_is_drawn_and_held_out_bpb_is_not(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    keys = [downstream_key("arc_easy", "acc"), downstream_key("arc_easy", "bpb"), downstream_key("arc_easy", "acc", "n"),
            heldout_key("c4", "loss"), heldout_key("c4", "bpb")]
    with open_store(url) as store:
        store.ensure_run("run")
        store.write_metrics("run", pd.DataFrame([{"step": s, "key": k, "value": 0.5} for s in (1000, 2000) for k in keys]))
    with open_store(url, read_only=True) as store:
        offered = queries.downstream_tasks(store, "run", None).names
        view = queries.load_view(store, ViewSpec(run="run"), 2000, None)
    drawn = view.run.long
    assert panels.resolution_text(view) == ""  # no train loss at all: the notices say so, once
    assert offered == ["arc_easy/acc", "arc_easy/bpb"]  # OLMo's downstream bpb is a metric of its own
    assert sorted(downstream_frame(drawn)["task"].unique()) == offered
    assert heldout_key("c4", "bpb") not in set(drawn["key"])


def test_downstream_tasks_come_in_the_reports_order_most_different_first(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    scores = {"arc_easy": (0.50, 0.50), "hellaswag": (0.60, 0.40), "boolq": (0.53, 0.50)}
    with open_store(url) as store:
        for i, name in enumerate(("run", "ref")):
            store.ensure_run(name)
            rows = [{"step": s, "key": TRAIN_LOSS, "value": 3.0} for s in range(0, 2001, 100)]
            for task, values in scores.items():
                for step in (1000, 2000):
                    rows += [{"step": step, "key": downstream_key(task, "acc"), "value": values[i]},
                             {"step": step, "key": downstream_key(task, "acc") + "/stderr", "value": 0.01}]
            store.write_metrics(name, pd.DataFrame(rows))
    with open_store(url, read_only=True) as store:
        ordered = queries.downstream_tasks(store, "run", "ref")
        assert ordered.names == ["hellaswag/acc", "boolq/acc", "arc_easy/acc"] and ordered.by_difference
        # Without a reference there is no difference to order by: alphabetical, and the page says so.
        alone = queries.downstream_tasks(store, "run", None)
        assert alone.names == ["arc_easy/acc", "boolq/acc", "hellaswag/acc"] and not alone.by_difference
    many = [f"task{i}/acc" for i in range(8)]
    for by_difference, said in ((True, "the first 6 of 8, most different first"), (False, "the first 6 of 8, alphabetically")):
        page = layout.run_page(ViewSpec(run="run"), ["run"], None, None, queries.DownstreamTasks(many, by_difference))
        (picker,) = [c for c in _walk(page) if getattr(c, "id", None) == "task-select"]
        assert picker.placeholder == said and picker.value == []
    # Tasks picked in the URL are the picker's value when the page opens.
    page = layout.run_page(ViewSpec(run="run", tasks=("task7/acc", "task1/acc")), ["run"], None, None,
                           queries.DownstreamTasks(many, True))
    (picker,) = [c for c in _walk(page) if getattr(c, "id", None) == "task-select"]
    assert picker.value == ["task7/acc", "task1/acc"]


def _walk(component):
    """Every Dash component in a layout tree."""
    yield component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children]:
        if hasattr(child, "to_plotly_json"):
            yield from _walk(child)
