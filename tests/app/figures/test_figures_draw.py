"""The figure functions: what each draws, NumPy arrays on the wire, escaping, empty input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from app import figures
from app.figures.data import COVERAGE
from app.figures.overlay import parse_series_uid, series_uid
from monitor.schema import (
    DATA_BATCH_REREAD_FRACTION,
    DATA_CURSOR,
    DATA_EPOCH,
    DATA_UNIQUE_FRACTION,
    PERF_DEVICE_TOKENS_PER_S,
    PERF_MFU,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    TRAIN_LOSS,
    downstream_key,
    heldout_key,
)

HOSTILE = '<img src=x onerror="alert(1)">&<b>'


def series(steps, values) -> pd.DataFrame:
    return pd.DataFrame({"step": np.asarray(steps, dtype="int64"), "value": np.asarray(values, dtype=float)})


def long(rows: dict[str, tuple]) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({"key": k, "step": np.asarray(s, dtype="int64"), "value": np.asarray(v, dtype=float)})
                      for k, (s, v) in rows.items()], ignore_index=True)


def detections(**cols) -> pd.DataFrame:
    base = {"detector": "spike", "metric": "train/grad_norm", "name": "loss spikes", "severity": "warning",
            "message": "m"}
    n = len(cols["start_step"])
    return pd.DataFrame({**{k: [v] * n for k, v in base.items()}, **cols,
                         "peak_step": cols.get("peak_step", cols["start_step"])})


def wire(fig: go.Figure) -> dict:
    return json.loads(fig.to_json())


def by_uid(fig: go.Figure, uid: str):
    return next(t for t in fig.data if t.uid == uid)


def test_overlay_draws_run_over_reference_as_typed_arrays():
    s = np.arange(5000)
    fig = figures.loss_overlay(series(s, 3 + np.exp(-s / 500)), series(s, 3.01 + np.exp(-s / 500)),
                               run_name="a", reference_name="b")
    assert [t.uid for t in fig.data] == [series_uid("reference", TRAIN_LOSS), series_uid("run", TRAIN_LOSS)]
    for trace in wire(fig)["data"]:
        # NumPy arrays travel as base64 typed arrays, never as JSON lists of numbers.
        assert set(trace["x"]) == {"dtype", "bdata"} and set(trace["y"]) == {"dtype", "bdata"}
    assert len(fig.to_json()) < 100_000


def test_overlay_switches_to_log_axis_only_for_a_wide_range():
    s = np.arange(100)
    assert figures.loss_overlay(series(s, 10 - s * 0.08), run_name="a").layout.yaxis.type == "log"
    assert figures.loss_overlay(series(s, 3 - s * 0.001), run_name="a").layout.yaxis.type is None


def test_the_steady_range_of_a_log_axis_is_drawn_on_a_readable_axis():
    s = np.arange(2000)
    # A char-level LSTM's loss: 1.5 at the start, 0.2 to 0.3 for most of the run. Clipped to that,
    # a log axis's round ticks left one label: the narrow range goes linear.
    lstm = 0.25 + 1.25 * np.exp(-s / 30.0) + 0.05 * np.sin(s)
    narrow = figures.loss_overlay(series(s, lstm), run_name="a", full_y=False).layout.yaxis
    assert narrow.type == "linear" and narrow.tickvals is None and narrow.range[1] < 0.35
    assert figures.loss_overlay(series(s, lstm), run_name="a").layout.yaxis.type == "log"  # the whole range
    # Still wide past the transient: log, with ticks for the range shown.
    wide = figures.loss_overlay(series(s, 0.3 + 30.0 * np.exp(-s / 30.0) + 3.0 * np.exp(-s / 600.0)),
                                run_name="a", full_y=False).layout.yaxis
    lo, hi = (10 ** v for v in wide.range)
    assert wide.type == "log" and len([t for t in wide.tickvals if lo <= t <= hi]) >= 3


def test_names_are_escaped_in_every_figure_that_shows_them():
    s = np.arange(10)
    overlay = figures.loss_overlay(series(s, s), series(s, s), run_name=HOSTILE, reference_name=HOSTILE)
    held = pd.DataFrame({"set": [HOSTILE], "step": [5], "loss": [3.0], "stderr": [0.1]})
    heldout = figures.heldout_figure(held, held, run_name=HOSTILE, reference_name=HOSTILE)
    alerts = figures.alerts_timeline(detections(start_step=[1], end_step=[2], message=[HOSTILE], name=[HOSTILE],
                                                metric=[HOSTILE]))
    for fig in (overlay, heldout, alerts):
        text = fig.to_json()
        assert "<img" not in text and "<b>" not in text
        assert "&lt;img" in text


def test_series_uid_round_trips_and_is_css_safe():
    for key in (TRAIN_LOSS, "eval/heldout/c4.en/loss", "train/grad_norm"):
        uid = series_uid("run", key)
        assert all(c.isalnum() or c in "-_" for c in uid)
        assert parse_series_uid(uid) == ("run", key)
    assert parse_series_uid(None) is None


def test_delta_figure_draws_band_around_zero_and_window_medians():
    s = np.arange(3000)
    rng = np.random.default_rng(0)
    windows, points = figures.reference_delta(series(s, 3 + rng.normal(0, 0.01, 3000) - 0.2),
                                              series(s, 3 + rng.normal(0, 0.01, 3000)))
    fig = figures.delta_figure(windows, points, run_name="a", reference_name="b")
    names = [t.name for t in fig.data]
    assert names[0] == "pointwise" and "divergence threshold" in names
    median = fig.data[-1]
    assert np.allclose(median.y, -0.2, atol=0.01)


def test_the_delta_figure_opens_on_the_band_not_on_the_first_windows():
    # Two recipes differ most in their first steps (a -1.1 window at the start of a real pair);
    # the y range is the windows' after that, as the loss panels open; the toggle shows it all.
    x = np.arange(100, 20_001, 100, dtype=float)
    delta = np.where(x < 600, -1.1, 0.01)
    windows = pd.DataFrame({"x": x, "delta": delta, "band": np.full(x.size, 0.05), "n": 100})
    opened = figures.delta_figure(windows, None, run_name="a", reference_name="b")
    assert opened.layout.yaxis.range == pytest.approx((-0.11, 0.11))
    whole = figures.delta_figure(windows, None, run_name="a", reference_name="b", full_y=True)
    assert whole.layout.yaxis.range == pytest.approx((-2.42, 2.42))


def test_heldout_figure_has_error_bars_per_set_and_run():
    frame = figures.heldout_frame(long({
        heldout_key("c4_en", "loss"): ([100, 200], [3.1, 3.0]), heldout_key("c4_en", "stderr"): ([100, 200], [0.01, 0.02]),
        heldout_key("pile", "loss"): ([100, 200], [2.9, 2.8]),
    }))
    fig = figures.heldout_figure(frame, frame, run_name="run", reference_name="ref")
    drawn = [t for t in fig.data if t.showlegend is False]
    assert len(drawn) == 4 and all(len(t.x) == 2 for t in drawn)
    # The legend names each run and each set once, not every pair of them.
    assert [t.name for t in fig.data if t.showlegend is not False] == ["ref", "run", "c4_en", "pile"]
    c4_run = next(t for t in fig.data if t.name == "c4_en · run")
    assert list(c4_run.error_y.array) == [0.01, 0.02]
    assert next(t for t in fig.data if t.name == "pile · run").error_y.array is None  # no stderr logged


def test_heldout_figure_counts_the_sets_it_draws_of_those_logged_as_downstream_counts_metrics():
    frame = figures.heldout_frame(long({heldout_key(name, "loss"): ([100, 200], [3.1, 3.0])
                                        for name in ("c4", "pile", "wiki", "books")}))
    fig = figures.heldout_figure(frame, frame, run_name="run", reference_name="ref", sets=["pile", "c4"])
    assert fig.layout.title.text.endswith(" — 2 of 4 sets")
    assert {t.name for t in fig.data if t.showlegend is not False} == {"ref", "run", "c4", "pile"}
    # All drawn: nothing to count.
    every = figures.heldout_figure(frame, frame, run_name="run", sets=["c4", "pile", "wiki", "books"])
    assert every.layout.title.text == "held-out loss at checkpoints (±1 s.e.)"


def test_a_point_no_line_reaches_gets_a_marker():
    # A run of one step: a line through one point draws nothing at all.
    one = figures.loss_overlay(series([1], [3.0]), series([1], [5.3]), run_name="one", reference_name="ref")
    assert all("markers" in t.mode and list(t.marker.size) == [6] for t in one.data)
    # One value between two gaps (NaN logged) gets a marker; the points on the line get none.
    gaps = figures.loss_overlay(series(range(6), [3.0, 2.9, np.nan, 2.8, np.nan, 2.7]), run_name="a")
    (trace,) = gaps.data
    assert "markers" in trace.mode and list(trace.marker.size) == [0, 0, 0, 6, 0, 6]
    # An unbroken line stays a line.
    assert figures.loss_overlay(series(range(3), [3.0, 2.9, 2.8]), run_name="a").data[0].mode == "lines"
    # The delta's lone window median too.
    windows = pd.DataFrame({"x": [500.0], "delta": [-0.1], "band": [0.03], "n": [100.0]})
    delta = figures.delta_figure(windows, None, run_name="a", reference_name="b")
    assert "markers" in delta.data[-1].mode


def test_downstream_figure_one_panel_per_task_up_to_the_limit():
    rows = {}
    for task in ("arc", "boolq", "hellaswag", "mmlu", "piqa", "sciq", "winogrande"):
        rows[downstream_key(task, "acc")] = ([1000, 2000], [0.5, 0.6])
        rows[downstream_key(task, "acc", "stderr")] = ([1000, 2000], [0.02, 0.02])
    frame = figures.downstream_frame(long(rows))
    fig = figures.downstream_figure(frame, frame, run_name="run", reference_name="ref")
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["arc/acc", "boolq/acc", "hellaswag/acc", "mmlu/acc", "piqa/acc", "sciq/acc"]
    assert "6 of 7 metrics" in fig.layout.title.text
    chosen = figures.downstream_figure(frame, None, run_name="run", tasks=["piqa/acc"])
    assert [a.text for a in chosen.layout.annotations] == ["piqa/acc"]
    assert list(chosen.data[0].error_y.array) == [0.02, 0.02]


def test_one_evaluation_is_ticked_at_its_step_not_at_fractional_steps_around_it():
    # A single lm-eval results file: plotly alone ticks 999, 999.5, 1000, 1,000.5, 1001.
    once = {downstream_key("arc", "acc"): ([1000], [0.41]), heldout_key("c4", "loss"): ([1000], [2.9])}
    fig = figures.downstream_figure(figures.downstream_frame(long(once)), None, run_name="run")
    assert fig.layout.xaxis.tickmode == "array" and list(fig.layout.xaxis.tickvals) == [1000]
    held = figures.heldout_figure(figures.heldout_frame(long(once)), None, run_name="run")
    assert list(held.layout.xaxis.tickvals) == [1000]
    # Many evaluations: plotly's own round ticks.
    many = {downstream_key("arc", "acc"): (list(range(1000, 11_000, 1000)), [0.41] * 10)}
    fig = figures.downstream_figure(figures.downstream_frame(long(many)), None, run_name="run")
    assert fig.layout.xaxis.tickmode is None and fig.layout.xaxis.tickvals is None


def test_picked_series_get_a_panel_each_run_over_reference_up_to_the_limit():
    keys = [f"custom/m{i}" for i in range(10)]
    run = long({k: ([1, 2, 3], [1.0, 2.0, 3.0]) for k in keys})
    ref = long({keys[0]: ([1, 2, 3], [1.5, 2.5, 3.5])})
    fig = figures.picked_series_figure(run, ref, keys, run_name="run", reference_name="ref")
    assert [a.text for a in fig.layout.annotations] == keys[:8]
    assert "the first 8 of 10" in fig.layout.title.text
    # A pick with nothing finite to draw is named, not dropped without a word.
    some = figures.picked_series_figure(run, ref, [keys[0], "custom/nan_only"], run_name="run")
    assert [a.text for a in some.layout.annotations] == [keys[0]]
    assert some.layout.title.text.endswith("no finite value here: custom/nan_only")
    first = [t for t in fig.data if t.xaxis == "x"]
    assert [t.name for t in first] == ["ref (reference)", "run"] and first[0].line.dash == "dash"
    # A pick neither run logged in the range shown: one line saying so, no empty grid.
    empty = figures.picked_series_figure(run, ref, ["other/key"], run_name="run", empty_reason="nothing here")
    assert not empty.data and empty.layout.annotations[-1].text == "nothing here"


def test_perplexity_from_millions_is_drawn_on_a_log_axis_and_accuracy_is_not():
    rows = {downstream_key("lambada", "ppl"): ([0, 1000, 2000], [4e6, 30.0, 25.0]),
            downstream_key("lambada", "acc"): ([0, 1000, 2000], [0.01, 0.3, 0.35])}
    frame = figures.downstream_frame(long(rows))
    fig = figures.downstream_figure(frame, None, run_name="run")
    titles = [a.text for a in fig.layout.annotations]
    axes = {titles[i]: fig.layout["yaxis" if i == 0 else f"yaxis{i + 1}"].type for i in range(len(titles))}
    assert axes == {"lambada/acc": None, "lambada/ppl": "log"}


def test_grad_norm_marks_each_spike_at_its_value():
    s = np.arange(1000)
    g = np.full(1000, 0.3)
    g[400] = 2.0
    fig = figures.grad_norm_figure(series(s, g), spikes=detections(start_step=[400]),
                                   spike_score=series(s, np.where(s >= 400, 0.001, 0.0)))
    spikes = next(t for t in fig.data if t.name.startswith("spikes"))
    assert list(spikes.x) == [400] and list(spikes.y) == [2.0]
    assert next(t for t in fig.data if t.name == "spike score").yaxis == "y2"
    # Its own round ticks, not ones placed at the grad norm's grid lines (0.71%, 5.96%, ...).
    assert fig.layout.yaxis2.tickmode == "auto"


def test_a_grad_norm_of_nan_only_is_named_not_drawn_as_empty_axes():
    fig = figures.grad_norm_figure(series(np.arange(500), np.full(500, np.nan)))
    assert not fig.data and fig.layout.annotations[-1].text == "grad norm logged at 500 steps, every value NaN or Inf"
    drawn = figures.grad_norm_figure(series(np.arange(500), np.r_[np.full(499, np.nan), 0.3]))
    assert drawn.data and not drawn.layout.annotations


def test_throughput_has_three_panels_and_shades_stalls_on_each():
    s = np.arange(200)
    step_time = np.full(200, 0.5)
    step_time[100:110] = 3.0
    perf = long({PERF_TOKENS_PER_S: (s, 1000 / step_time), PERF_MFU: (s, 0.2 / step_time),
                 PERF_STEP_TIME_S: (s, step_time)})
    fig = figures.throughput_figure(perf, stalls=detections(start_step=[100], end_step=[109], detector=["throughput"]))
    assert {t.yaxis for t in fig.data if t.uid} == {"y", "y2", "y3"}
    assert [(sh.x0, sh.x1, sh.yref) for sh in fig.layout.shapes] == [(100, 109, "y domain"), (100, 109, "y2 domain"),
                                                                    (100, 109, "y3 domain")]
    stall = next(t for t in fig.data if t.name.startswith("stalls"))
    assert stall.yaxis == "y3" and list(stall.y) == [3.0]


def test_data_figure_splits_cursor_and_coverage():
    s = np.arange(100)
    fig = figures.data_figure(long({DATA_CURSOR: (s, s * 64), DATA_UNIQUE_FRACTION: (s, s / 200)}))
    assert len({t.xaxis for t in fig.data}) == 2
    cover = figures.data_figure(long({DATA_UNIQUE_FRACTION: (s, s / 200), DATA_BATCH_REREAD_FRACTION: (s, s / 400)}))
    assert len({t.xaxis for t in cover.data}) == 1
    assert [t.name for t in cover.data] == ["seen ≥ once", "of each batch: read before"]


def test_data_figure_gives_each_part_its_own_legend_and_epochs_plain_ticks():
    """Seven entries in one legend wrap into the title; epoch ticks of 1 crowd a run that reached
    14 epochs (a double-sharded loader) and show one tick on a run that stays under one."""
    s = np.arange(200)
    keys = {DATA_CURSOR: (s, s * 256), DATA_EPOCH: (s, s * 0.07)}
    keys.update({key: (s, s / 400) for key, _, _ in COVERAGE})
    fig = figures.data_figure(long(keys))
    legends = {t.name: t.legend or "legend" for t in fig.data}
    assert legends["cursor (records)"] == legends["epoch"] == "legend"
    assert {legends[label] for _, label, _ in COVERAGE} == {"legend2"}
    coverage_top = fig.layout.yaxis3.domain[1]
    cursor_bottom = fig.layout.yaxis.domain[0]
    assert coverage_top < fig.layout.legend2.y < cursor_bottom  # between the two parts
    epoch_axis = next(a for a in (fig.layout.yaxis2, fig.layout.yaxis4) if a.title.text == "epoch")
    assert epoch_axis.dtick is None and epoch_axis.tickmode == "auto"


def test_event_markers_on_every_panel_with_checkpoints_thinned():
    s = np.arange(200)
    perf = long({PERF_TOKENS_PER_S: (s, s), PERF_MFU: (s, s), PERF_STEP_TIME_S: (s, s)})
    fig = figures.throughput_figure(perf)
    events = pd.DataFrame({"step": list(range(0, 200, 2)) * 3 + [150, 151],
                           "kind": ["checkpoint"] * 300 + ["resume", "restart"]})
    figures.add_event_markers(fig, events, max_per_kind=20)
    marks = [t for t in fig.data if t.legendgroup and t.legendgroup.startswith("event-")]
    assert len(marks) == 3 * 3  # three kinds on each of three panels
    panels = {t.xaxis for t in marks}
    assert panels == {"x", "x2", "x3"}
    checkpoint = next(t for t in marks if t.legendgroup == "event-checkpoint")
    assert len(checkpoint.x) == 3 * 20 and checkpoint.name == "checkpoint (20 of 100 shown)"
    assert list(next(t for t in marks if t.legendgroup == "event-resume").x[:2]) == [150, 150]
    # Each marker axis lies over its panel's own y axis and spans it whatever the data range.
    overlays = {t.yaxis for t in marks}
    for name in overlays:
        axis = fig.layout["yaxis" + name[1:]]
        assert tuple(axis.range) == (0, 1) and axis.overlaying in ("y", "y2", "y3")


def test_a_trainer_that_logs_one_devices_rate_gets_its_panel():
    # OLMo-core, torchtitan, Composer, MaxText and torchtune log tokens per second per device only.
    s = np.arange(50)
    fig = figures.throughput_figure(long({PERF_DEVICE_TOKENS_PER_S: (s, s), PERF_STEP_TIME_S: (s, s)}))
    assert [t.name for t in fig.data] == ["tokens/s per device", "step time (s)"]


def test_range_highlight_on_every_panel():
    s = np.arange(50)
    fig = figures.throughput_figure(long({PERF_TOKENS_PER_S: (s, s), PERF_MFU: (s, s)}))
    figures.add_range_highlight(fig, 10, 20)
    assert [(sh.xref, sh.yref) for sh in fig.layout.shapes] == [("x", "y domain"), ("x2", "y2 domain")]


def test_alerts_timeline_bars_span_their_steps_and_stay_visible_when_one_step():
    frame = detections(start_step=[100, 500], end_step=[400, 500], severity=["critical", "warning"],
                       detector=["reference_divergence", "spike"])
    fig = figures.alerts_timeline(frame, x_range=(0, 1000))
    critical = next(t for t in fig.data if t.name == "critical")
    warning = next(t for t in fig.data if t.name == "warning")
    assert list(critical.base) == [100] and list(critical.x) == [300]
    assert warning.x[0] >= 4  # a one-step alert still has a visible width


def test_alerts_timeline_rows_are_the_incidents_names_not_detector_names():
    frame = detections(start_step=[10, 300, 50, 60], end_step=[20, 310, 90, 70],
                       detector=["spike", "spike", "spike", "memorization"],
                       metric=["train/loss", "train/loss", "train/grad_norm", "train/loss"],
                       name=["loss spikes", "loss spikes", "loss spikes",
                             "memorization: train loss below the reference while held-out loss is tied"])
    fig = figures.alerts_timeline(frame)
    rows = [y for t in fig.data for y in t.y]
    # Recurrences of one problem share a row; a name two metrics share says which metric.
    assert rows.count("loss spikes (train/loss)") == 2 and "loss spikes (train/grad_norm)" in rows
    memorization = next(y for y in rows if y.startswith("memorization"))
    assert "<br>" in memorization and memorization.replace("<br>", " ") == frame["name"].iloc[3]
    assert not any("·" in y for y in rows)


def test_every_function_accepts_empty_frames():
    empty = series([], [])
    empty_long = long({TRAIN_LOSS: ([], [])})
    none = pd.DataFrame(columns=["detector", "metric", "name", "severity", "start_step", "end_step", "peak_step", "message"])
    made = [
        figures.loss_overlay(empty, empty, run_name="a"),
        figures.delta_figure(*figures.reference_delta(empty, empty), run_name="a", reference_name="b"),
        figures.heldout_figure(figures.heldout_frame(empty_long), None, run_name="a"),
        figures.gap_figure(figures.train_heldout_gap(empty, figures.heldout_frame(empty_long)), run_name="a"),
        figures.downstream_figure(figures.downstream_frame(empty_long), run_name="a"),
        figures.grad_norm_figure(empty),
        figures.throughput_figure(empty_long),
        figures.data_figure(empty_long),
        figures.alerts_timeline(none),
    ]
    for fig in made:
        assert fig.layout.annotations and fig.layout.annotations[-1].text.startswith("no ")
