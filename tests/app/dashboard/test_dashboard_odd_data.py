"""Runs whose data the charts did not expect cost their own panel or cell, never the page: a token
count that grows non-linearly or not at all, a NaN-only metric, a key with one point."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from app.dashboard import panels, queries
from app.dashboard.app import create_app
from app.dashboard.routes import ViewSpec
from monitor.store import open_store

_BUILDER = Path(__file__).resolve().parents[2] / "e2e" / "odd_runs_store.py"
PANELS = ("loss", "delta", "heldout", "heldout_delta", "gap", "evals", "grad_norm", "throughput", "data")


def _load_builder():
    spec = importlib.util.spec_from_file_location("odd_runs_store", _BUILDER)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def odd_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('odd') / 'odd.db'}"
    _load_builder().build_odd_runs(url)
    return url


def post(app, output: str, inputs: list[dict], outputs, state=None) -> dict:
    output = output if output in app.callback_map else next(k for k in app.callback_map if output in k)
    body = {"output": output, "outputs": outputs, "inputs": inputs, "changedPropIds": [], "state": state or []}
    response = app.server.test_client().post("/_dash-update-component", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data())["response"]


def open_page(app, path: str, search: str = "") -> str:
    page = post(app, "page.children", [{"id": "url", "property": "pathname", "value": path},
                                       {"id": "url", "property": "search", "value": search}],
                {"id": "page", "property": "children"}, state=[{"id": "written-url", "property": "data", "value": None}])
    return json.dumps(page)


def render(app, view: dict) -> dict:
    outputs = [[{"id": {"name": p, "type": "panel"}, "property": "figure"} for p in PANELS],
               [{"id": {"name": p, "type": "panel"}, "property": "style"} for p in PANELS],
               {"id": "live", "property": "data"}, {"id": "resolution", "property": "children"},
               {"id": "notices", "property": "children"},
               {"id": "settings", "property": "children"}]
    return post(app, "live.data", [{"id": "view", "property": "data", "value": view},
                                   {"id": "refresh", "property": "data", "value": 0}], outputs)


def test_the_overview_lists_every_run_with_its_tokens(odd_url):
    with open_store(odd_url, read_only=True) as store:
        frame = queries.overview(store).set_index("name")
        tokens = store.read_scalars("packed", ["train/tokens"], max_points=10_000)["value"]
    assert set(frame.index) == {"packed", "stuck"}
    assert frame.loc["packed", "tokens"] == tokens.iloc[-1]
    assert frame["note"].isna().all()


def test_a_cell_that_cannot_be_read_costs_that_cell_with_its_reason(odd_url, monkeypatch):
    real = queries._tokens

    def broken(store, run, *args):
        if run == "stuck":
            raise ValueError("a token count the chart cannot read\nsecond line")
        return real(store, run, *args)

    monkeypatch.setattr(queries, "_tokens", broken)
    with open_store(odd_url, read_only=True) as store:
        frame = queries.overview(store).set_index("name")
    assert frame.loc["stuck", "note"] == "tokens: a token count the chart cannot read"
    assert frame.loc["packed", "tokens"] > 0 and pd.isna(frame.loc["packed", "note"])


def test_the_run_page_of_a_run_whose_tokens_do_not_grow_draws_every_panel_it_has_data_for(odd_url):
    with open_store(odd_url, read_only=True) as store:
        app = create_app(store)
        page = open_page(app, "/run/stuck", "?axis=tokens")
        assert "run-page" in page and "arc_easy/acc" in page
        response = render(app, {"spec": ViewSpec(run="stuck", axis="tokens").to_dict(), "range": None,
                                "notes": []})
    figures = {json.loads(k)["name"]: v["figure"] for k, v in response.items() if k.startswith("{")}
    assert sorted(figures) == sorted(PANELS)
    assert any(t.get("uid") == "run-train_2f_loss" for t in figures["loss"]["data"])
    assert any(t.get("uid") == "reference-train_2f_loss" for t in figures["loss"]["data"])
    notices = response["notices"]["children"]
    assert notices == ["run 'stuck': train/tokens does not grow with steps, so it gives no token axis: "
                       "showing steps. ", "'stuck' logged only NaN or Inf in this range for train/grad_norm. ",
                       "Not drawn: throughput (not logged), data loader (not logged). "]
    styles = {json.loads(k)["name"]: v["style"] for k, v in response.items() if k.startswith("{")}
    assert {p for p, style in styles.items() if style} == {"throughput", "data"}
    assert styles["throughput"] == {"display": "none"}


def test_a_panel_that_fails_shows_its_reason_and_the_rest_draw(odd_url, monkeypatch):
    def broken(*_args, **_kwargs):
        raise ValueError("one point cannot make a curve")

    monkeypatch.setattr(panels.figures, "heldout_figure", broken)
    with open_store(odd_url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run="stuck"), 500, None)
    rendered = panels.build(view)
    notes = [a.text for a in rendered.figures["heldout"].layout.annotations]
    assert notes == ["the heldout panel could not be drawn: one point cannot make a curve"]
    assert any(t.uid == "run-train_2f_loss" for t in rendered.figures["loss"].data)
    assert len(rendered.figures["evals"].data) > 0


def test_tasks_are_ordered_from_point_budgeted_reads_never_a_full_load(odd_url, monkeypatch):
    with open_store(odd_url, read_only=True) as store:
        def no_full_load(*_args, **_kwargs):
            raise AssertionError("the run page loaded a run at full resolution")

        monkeypatch.setattr(store, "load_run", no_full_load)
        budgets = []
        real = store.read_scalars

        def counted(*args, **kwargs):
            budgets.append(kwargs.get("max_points"))
            return real(*args, **kwargs)

        monkeypatch.setattr(store, "read_scalars", counted)
        # The two runs' tokens cannot share an axis (one never grows): steps order the tasks.
        assert queries.downstream_tasks(store, "stuck", "packed", max_points=300).names == [
            "arc_easy/acc", "hellaswag/acc", "piqa/acc"]
    assert budgets and all(b == 300 for b in budgets)


def test_a_series_logged_only_as_nan_is_named_not_left_as_an_empty_legend(odd_url):
    """The stuck run's grad norm is NaN at every step: its panel has nothing to draw, and the page says
    why, whether the view is read whole or downsampled (which drops NaN rows); the packed run,
    all finite, gets no such line."""
    builder = _load_builder()
    with open_store(odd_url, read_only=True) as store:
        for budget in (10_000, 500):
            stuck = queries.load_view(store, ViewSpec(run=builder.STUCK), budget, None).notices
            assert f"{builder.STUCK!r} logged only NaN or Inf in this range for train/grad_norm" in stuck, stuck
            packed = queries.load_view(store, ViewSpec(run=builder.PACKED), budget, None).notices
            assert not any("only NaN" in n for n in packed), packed
