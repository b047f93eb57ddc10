"""Live polling: only new steps are read and appended; a full redraw when appending would mislead."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from app.dashboard import live, panels, queries
from app.dashboard.routes import ViewSpec
from app.figures.overlay import series_uid
from monitor.schema import PERF_STEP_TIME_S, TRAIN_LOSS, heldout_key
from monitor.store import open_store

RUN, REFERENCE = "olmo-repro", "olmo-reference"
STEPS = 600


@pytest.fixture
def url(tmp_path, demo):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    demo.build(url, steps=STEPS)
    return url


def render(url, step_range=None, max_points=2000):
    with open_store(url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run=RUN), max_points, step_range)
        rendered = panels.build(view)
        return rendered, live.initial_state(store, view, rendered, now=0.0)


def poll(url, state, max_points=2000, now=1.0):
    with open_store(url, read_only=True) as store:
        return live.poll(store, state, max_points=max_points, full_refresh_s=60.0, now=now)


def write(url, run, steps, key=TRAIN_LOSS, value=2.5):
    with open_store(url) as store:
        store.write_metrics(run, pd.DataFrame({"step": steps, "key": key, "value": value}))


def trace_index(rendered, panel, role, key):
    return next(i for i, t in enumerate(rendered.figures[panel].data) if t.uid == series_uid(role, key))


def test_new_steps_are_appended_to_their_traces(url):
    rendered, state = render(url)
    json.dumps(state)  # the page keeps it in a dcc.Store
    assert poll(url, state).append is None  # nothing new
    write(url, RUN, np.arange(STEPS, STEPS + 3))
    write(url, RUN, [STEPS], key=PERF_STEP_TIME_S, value=0.5)
    result = poll(url, state)
    assert not result.refresh
    update, indices = result.append["loss"]
    assert indices == [trace_index(rendered, "loss", "run", TRAIN_LOSS)]
    assert update == {"x": [[STEPS, STEPS + 1, STEPS + 2]], "y": [[2.5, 2.5, 2.5]]}
    assert result.append["throughput"][1] == [trace_index(rendered, "throughput", "run", PERF_STEP_TIME_S)]
    assert result.state["last"]["run"][TRAIN_LOSS] == STEPS + 2
    assert poll(url, result.state).append is None  # read once, appended once


def test_nan_is_sent_as_a_gap(url):
    _, state = render(url)
    write(url, RUN, [STEPS], value=float("nan"))
    assert poll(url, state).append["loss"][0]["y"] == [[None]]


def test_reference_is_appended_only_as_far_as_the_run_has_got(url):
    rendered, state = render(url)
    write(url, REFERENCE, np.arange(STEPS, STEPS + 50))
    assert poll(url, state).append is None
    write(url, RUN, np.arange(STEPS, STEPS + 10))
    result = poll(url, state)
    ref = trace_index(rendered, "loss", "reference", TRAIN_LOSS)
    update, indices = result.append["loss"]
    assert update["x"][indices.index(ref)] == list(range(STEPS, STEPS + 10))


def test_a_new_heldout_point_asks_for_a_full_render(url):
    _, state = render(url)
    write(url, RUN, [STEPS], key=heldout_key("c4_en"), value=3.0)
    result = poll(url, state)
    assert result.refresh and result.append is None


def test_new_events_or_detections_ask_for_a_full_render(url):
    _, state = render(url)
    with open_store(url) as store:
        store.write_events(RUN, [{"step": STEPS, "kind": "checkpoint", "payload": {}}])
    assert poll(url, state).refresh


def test_a_zoomed_view_is_not_appended_to(url):
    _, state = render(url, step_range=(100, 200))
    write(url, RUN, np.arange(STEPS, STEPS + 3))
    result = poll(url, state)
    assert result.append is None and not result.refresh


def test_too_many_appended_points_or_an_old_render_redraw_instead(url):
    _, state = render(url, max_points=200)
    write(url, RUN, np.arange(STEPS, STEPS + 150))
    assert poll(url, state, max_points=200).refresh  # more than half the budget at once
    _, state = render(url)
    write(url, RUN, [STEPS + 200])
    assert poll(url, state, now=61.0).refresh  # new points a minute after the last render


def test_alert_changes_are_reported(url, demo):
    _, state = render(url)
    result = poll(url, state)
    assert not result.alerts_changed
    with open_store(url) as store:
        demo.add_alert(store, RUN, "spike", TRAIN_LOSS, "warning", 10, 10, "new")
    result = poll(url, result.state)
    assert result.alerts_changed and not result.refresh
    assert not poll(url, result.state).alerts_changed


def test_a_picked_series_is_drawn_run_over_reference_and_appended_live(url):
    lr = "optim/lr"
    write(url, RUN, np.arange(STEPS), key=lr, value=3e-4)
    write(url, REFERENCE, np.arange(STEPS), key=lr, value=6e-4)
    with open_store(url, read_only=True) as store:
        offered = queries.series_options(store, RUN, REFERENCE)
        view = queries.load_view(store, ViewSpec(run=RUN), 2000, None, picked=(lr,))
        rendered = panels.build(view, picked=[lr])
        state = live.initial_state(store, view, rendered, now=0.0)
        unpicked = panels.build(queries.load_view(store, ViewSpec(run=RUN), 2000, None))
    assert lr in offered and TRAIN_LOSS in offered
    figure = rendered.figures["picked"]
    assert {t.uid for t in figure.data if t.uid} == {series_uid("run", lr), series_uid("reference", lr)}
    assert [a.text for a in figure.layout.annotations] == [lr]
    # Nothing picked: the panel is hidden, and the "Not drawn" line does not mention it.
    assert "picked" in unpicked.left_out and "picked" not in (unpicked.left_out_line() or "")
    write(url, RUN, np.arange(STEPS, STEPS + 3), key=lr, value=2e-4)
    write(url, RUN, np.arange(STEPS, STEPS + 3))
    update, indices = poll(url, state).append["picked"]
    assert indices == [trace_index(rendered, "picked", "run", lr)] and update["y"] == [[2e-4, 2e-4, 2e-4]]
