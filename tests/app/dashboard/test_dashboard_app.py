"""The app end to end without a browser: the command, the read-only store, callbacks over HTTP,
and no shared state between two apps in one process."""

from __future__ import annotations

import base64
import json

import dash._callback
import numpy as np
import pandas as pd
import psycopg
from plotly.utils import PlotlyJSONEncoder
import pytest

from app.cli import main
from app.dashboard import layout, queries
from app.dashboard.app import create_app
from app.dashboard.config import DashboardConfig
from app.dashboard.auth import AuthConfig
from app.dashboard.routes import parse_run_path
from app.dashboard.server import make_server, open_app
from monitor.errors import GapwatchError
from monitor.judging.settings_diff import compare_settings
from monitor.schema import TRAIN_LOSS
from monitor.store import open_store


PANELS = ("loss", "delta", "heldout", "heldout_delta", "gap", "evals", "grad_norm", "throughput", "data")


def post_callback(app, output_part: str, inputs: list[dict], outputs, state: list[dict] | None = None,
                  changed: list[str] | None = None) -> dict:
    """POST one callback as dash-renderer does; `output_part` picks it from the app's callback map;
    `changed`: the inputs that triggered it ("id.property")."""
    # Exact first: a property written by two callbacks has a second, suffixed key.
    output = output_part if output_part in app.callback_map else next(k for k in app.callback_map if output_part in k)
    client = app.server.test_client()
    body = {"output": output, "outputs": outputs, "inputs": inputs, "changedPropIds": changed or [],
            "state": state or []}
    response = client.post("/_dash-update-component", json=body)
    assert response.status_code == 200, response.text
    return json.loads(response.text)["response"]


def test_render_callback_sends_typed_arrays_within_budget(demo_url):
    with open_store(demo_url, read_only=True) as store:
        app = create_app(store, DashboardConfig(max_points=500))
        outputs = [[{"id": {"name": p, "type": "panel"}, "property": "figure"} for p in PANELS],
                   [{"id": {"name": p, "type": "panel"}, "property": "style"} for p in PANELS],
                   {"id": "live", "property": "data"}, {"id": "resolution", "property": "children"},
                   {"id": "notices", "property": "children"},
               {"id": "settings", "property": "children"}]
        view = {"spec": {"run": "olmo-repro"}, "range": None}
        response = post_callback(app, "live.data", [{"id": "view", "property": "data", "value": view},
                                                    {"id": "refresh", "property": "data", "value": 0}],
                                 outputs)
    figures = {json.loads(k)["name"]: v["figure"] for k, v in response.items() if k.startswith("{")}
    assert sorted(figures) == sorted(PANELS)
    run = next(t for t in figures["loss"]["data"] if t.get("uid") == "run-train_2f_loss")
    assert set(run["y"]) == {"dtype", "bdata"}  # base64 typed array, not a list of numbers
    n = len(np.frombuffer(base64.b64decode(run["y"]["bdata"]), dtype=run["y"]["dtype"]))
    assert 0 < n <= 500
    assert response["resolution"]["children"].startswith("downsampled")
    # The demo pair logs every panel's series: none is left out, and no line says so.
    hidden = {json.loads(k)["name"] for k, v in response.items() if k.startswith("{") and v["style"]}
    assert hidden == set() and response["notices"]["children"] == []


def test_the_tasks_a_view_picks_are_the_evals_drawn(demo_url):
    """Downstream metrics picked (kept in the view, and so in the URL) are the ones drawn, in the order
    picked; with none picked, the first few in the report's order."""
    outputs = [[{"id": {"name": "evals", "type": "panel"}, "property": "figure"}],
               [{"id": {"name": "evals", "type": "panel"}, "property": "style"}],
               {"id": "live", "property": "data"}, {"id": "resolution", "property": "children"},
               {"id": "notices", "property": "children"},
               {"id": "settings", "property": "children"}]

    def titles(view: dict) -> list[str]:
        response = post_callback(app, "live.data", [{"id": "view", "property": "data", "value": view},
                                                    {"id": "refresh", "property": "data", "value": 0}], outputs)
        (figure,) = [v["figure"] for k, v in response.items() if k.startswith("{")]
        return [a["text"] for a in figure["layout"].get("annotations", []) if "<" not in a["text"]]

    with open_store(demo_url, read_only=True) as store:
        tasks = queries.downstream_tasks(store, "olmo-repro", None).names
        app = create_app(store, DashboardConfig(max_points=500))
        picked = [tasks[-1], tasks[0]]
        assert titles({"spec": {"run": "olmo-repro", "tasks": picked}, "range": None, "tasks": tasks}) == picked
        assert titles({"spec": {"run": "olmo-repro"}, "range": None, "tasks": tasks}) != picked
        # Picking them writes them into the view and the URL (so a link opens the same panels).
        inputs = [{"id": i, "property": p, "value": v} for i, p, v in (
            ("ref-select", "value", None), ("axis-select", "value", "step"), ("show-all", "n_clicks", None),
            ("smoothing", "value", 0), ("full-y", "value", []), ("series-pick", "value", []),
            ("task-select", "value", picked))]
        inputs.append([])  # no panel was zoomed
        view = {"spec": {"run": "olmo-repro"}, "range": None, "tasks": tasks}
        response = post_callback(app, "view.data", inputs,
                                 [{"id": "view", "property": "data"}, {"id": "url", "property": "search"},
                                  {"id": "written-url", "property": "data"}],
                                 state=[{"id": "view", "property": "data", "value": view},
                                        {"id": "url", "property": "pathname", "value": "/run/olmo-repro"}],
                                 changed=["task-select.value"])
        assert response["view"]["data"]["spec"]["tasks"] == picked
        search = response["url"]["search"]
        assert parse_run_path("/run/olmo-repro", search).tasks == tuple(picked)


def test_two_apps_share_nothing(tmp_path):
    stores = []
    for name in ("first", "second"):
        url = f"sqlite:///{tmp_path / name}.db"
        with open_store(url) as store:
            store.ensure_run(f"run-{name}")
            store.write_metrics(f"run-{name}", pd.DataFrame({"step": [0], "key": TRAIN_LOSS, "value": [1.0]}))
        stores.append(open_store(url, read_only=True))
    apps = [create_app(s) for s in stores]
    assert dash._callback.GLOBAL_CALLBACK_LIST == [] and dash._callback.GLOBAL_CALLBACK_MAP == {}
    for app, name in zip(apps, ("first", "second")):
        response = post_callback(app, "runs-table.children",
                                 [{"id": "poll", "property": "n_intervals", "value": None},
                                  {"id": "url", "property": "pathname", "value": "/"}],
                                 {"id": "runs-table", "property": "children"})
        text = json.dumps(response)
        other = "second" if name == "first" else "first"
        assert f"run-{name}" in text and f"run-{other}" not in text
    for s in stores:
        s.close()


def test_server_opens_the_store_read_only(demo_url, tmp_path):
    config = DashboardConfig(store_url=demo_url, port=0)
    app = open_app(config, AuthConfig())
    store = app.server.extensions["gapwatch_store"]
    assert store.read_only
    with pytest.raises(Exception, match="readonly"):
        store.ensure_run("written-by-the-dashboard")
    server = make_server(app, config)
    try:
        assert int(server.effective_port) > 0
    finally:
        server.close()
        store.close()
    with pytest.raises(GapwatchError, match="no gapwatch store at"):
        open_app(DashboardConfig(store_url=f"sqlite:///{tmp_path / 'missing.db'}"), AuthConfig())


def test_command_refuses_public_bind_without_auth(demo_url, capsys, monkeypatch):
    monkeypatch.delenv("GAPWATCH_DASHBOARD_PASSWORD", raising=False)
    monkeypatch.delenv("GAPWATCH_DASHBOARD_TOKEN", raising=False)
    assert main(["dashboard", "--store", demo_url, "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to serve on 0.0.0.0 without authentication" in err and "Traceback" not in err
    assert main(["dashboard", "--store", demo_url, "--poll", "0"]) == 2


def test_clicking_an_alert_bar_opens_its_step_range(demo_url):
    with open_store(demo_url, read_only=True) as store:
        app = create_app(store)
        view = {"spec": {"run": "olmo-repro", "reference": None, "axis": "tokens"}, "range": None}
        click = {"points": [{"customdata": [1200, 1500], "x": 300, "base": 1200}]}
        response = post_callback(app, "url.search", [{"id": "alerts-graph", "property": "clickData", "value": click}],
                                 {"id": "url", "property": "search"},
                                 state=[{"id": "view", "property": "data", "value": view}])
        assert response["url"]["search"] == "?axis=tokens&start=1200&end=1500"
        # Dash sends clickData with no customdata when a click lands on no bar: nothing happens.
        body = {"output": "url.search", "outputs": {"id": "url", "property": "search"}, "changedPropIds": [],
                "inputs": [{"id": "alerts-graph", "property": "clickData", "value": {"points": [{"x": 3}]}}],
                "state": [{"id": "view", "property": "data", "value": view}]}
        answer = app.server.test_client().post("/_dash-update-component", json=body)
        assert json.loads(answer.get_data())["response"] == {}  # no_update: the page stays


def test_compare_form_links_any_two_runs(demo_url):
    with open_store(demo_url, read_only=True) as store:
        app = create_app(store)
        inputs = [{"id": "compare-a", "property": "value", "value": "olmo-reference"},
                  {"id": "compare-b", "property": "value", "value": "a run/with?odd=name"}]
        response = post_callback(app, "compare-link.href", inputs, {"id": "compare-link", "property": "href"})
    assert response["compare-link"]["href"] == "/run/olmo-reference?ref=a+run%2Fwith%3Fodd%3Dname"


def test_an_unreachable_store_keeps_the_page_and_says_why(pg_url, demo):
    demo.build(pg_url, steps=200)
    with open_store(pg_url, read_only=True) as store:
        app = create_app(store)
        outputs = [[{"id": {"name": p, "type": "panel"}, "property": "figure"} for p in PANELS],
                   [{"id": {"name": p, "type": "panel"}, "property": "style"} for p in PANELS],
                   {"id": "live", "property": "data"}, {"id": "resolution", "property": "children"},
                   {"id": "notices", "property": "children"},
               {"id": "settings", "property": "children"}]
        inputs = [{"id": "view", "property": "data", "value": {"spec": {"run": "olmo-repro"}, "range": None}},
                  {"id": "refresh", "property": "data", "value": 0}]
        first = post_callback(app, "live.data", inputs, outputs)
        assert not any("cannot be read" in n for n in first["notices"]["children"])
        # The database goes away under the running dashboard (its connections are cut too).
        name = pg_url.rsplit("/", 1)[1]
        with psycopg.connect(pg_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        response = post_callback(app, "live.data", inputs, outputs)
        assert list(response) == ["notices"]  # the panels keep what they show
        assert response["notices"]["children"][0].startswith("The store cannot be read (")
        assert name in response["notices"]["children"][0]  # the driver's reason: no such database
        page = post_callback(app, "page.children", [{"id": "url", "property": "pathname", "value": "/"},
                                                    {"id": "url", "property": "search", "value": ""}],
                             {"id": "page", "property": "children"},
                             state=[{"id": "written-url", "property": "data", "value": None}])
        assert "Store unavailable" in json.dumps(page)
        poll_outputs = [{"id": "append", "property": "data"}, {"id": "refresh", "property": "data"},
                        {"id": "alerts-version", "property": "data"}, {"id": "live", "property": "data"}]
        poll_state = [{"id": "live", "property": "data", "value": first["live"]["data"]},
                      {"id": "refresh", "property": "data", "value": 0},
                      {"id": "alerts-version", "property": "data", "value": 0}]
        poll = post_callback(app, "append.data", [{"id": "poll", "property": "n_intervals", "value": 1}],
                             poll_outputs, state=poll_state)
        assert poll == {}  # nothing changes; the next poll tries again


def test_the_command_serves_with_a_short_switch_interval(demo_url, monkeypatch):
    """A request waiting on the store gets the interpreter lock back within the dashboard's switch
    interval, not Python's default, while another request draws a figure (bench_busy_reads.py)."""
    import sys

    import app.dashboard.server as server_module
    from app.commands.dashboard import SWITCH_INTERVAL_S

    seen = {}

    class Served:
        effective_port = 8050

        def run(self):
            seen["interval"] = sys.getswitchinterval()

        def close(self):
            seen["closed"] = True

    monkeypatch.setattr(server_module, "make_server", lambda app, config: Served())
    before = sys.getswitchinterval()
    try:
        assert main(["dashboard", "--store", demo_url]) == 0
    finally:
        sys.setswitchinterval(before)
    assert seen == {"interval": pytest.approx(SWITCH_INTERVAL_S), "closed": True} and SWITCH_INTERVAL_S < before


def test_not_judged_says_how_far_the_last_detect_judged_and_whether_the_watch_service_judges(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url) as store:
        store.ensure_run("r")
        store.write_metrics("r", pd.DataFrame({"step": np.arange(300), "key": TRAIN_LOSS, "value": 3.0}))
    outputs = [{"id": "alerts-graph", "property": "figure"}, {"id": "alerts-list", "property": "children"},
               {"id": "not-judged-list", "property": "children"}]
    inputs = [{"id": "view", "property": "data", "value": {"spec": {"run": "r"}, "range": None}},
              {"id": "alerts-version", "property": "data", "value": 0}]

    def listed() -> str:
        with open_store(url, read_only=True) as store:
            items = post_callback(create_app(store), "not-judged-list.children", inputs, outputs)
        return json.dumps(items["not-judged-list"]["children"])

    assert "No whole-run judgement of this run is stored" in listed()
    # Watched, it was judged: its alerts are what was found, and detect says what could not be judged.
    assert main(["watch", "--run", "r", "--store", url, "--once"]) == 0
    watched = listed()
    assert "The watch service judges this run as it logs" in watched and "gapwatch detect --run r" in watched
    assert main(["detect", "--run", "r", "--store", url]) == 0
    fresh = listed()
    assert "judged to step 299." in fresh and "it compares with a reference run" in fresh and "now" not in fresh
    with open_store(url) as store:
        store.write_metrics("r", pd.DataFrame({"step": np.arange(300, 500), "key": TRAIN_LOSS, "value": 3.0}))
    stale = listed()
    assert "judged to step 299; the run is at step 499 now" in stale and "gapwatch detect --run r" in stale


def test_the_thresholds_drawn_are_the_ones_the_watch_config_judges_by(demo_url, tmp_path, monkeypatch):
    """`gapwatch dashboard --config watch.yaml` draws the train-delta band with the watch
    service's detector settings, as its alerts were judged; without it, with the defaults."""
    import app.dashboard.server as server_module
    from app.dashboard import panels, queries
    from app.dashboard.routes import ViewSpec

    config = tmp_path / "watch.yaml"
    config.write_text("detector_params: {reference_divergence: {noise_level: 0.02}}\n")
    served = {}

    class Served:
        effective_port = 8050

        def run(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(server_module, "make_server", lambda app, config: served.update(config=config) or Served())
    assert main(["dashboard", "--store", demo_url, "--config", str(config)]) == 0
    params = served["config"].detector_params
    assert params == {"reference_divergence": {"noise_level": 0.02}}
    with open_store(demo_url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run="olmo-repro"), 2000, None)

    def band(settings) -> np.ndarray:
        figure = panels.build(view, params=settings).figures["delta"]
        return np.abs(np.asarray(next(t for t in figure.data if t.fill == "tonexty").y, dtype=float))

    assert (band(params) > 2 * band(None)).all()


def test_a_run_whose_reference_is_not_in_the_store_says_so_on_its_page(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url) as store:
        store.ensure_run("r", reference="not-imported-yet")
        store.write_metrics("r", pd.DataFrame({"step": np.arange(300), "key": TRAIN_LOSS, "value": 3.0}))
    inputs = [{"id": "url", "property": "pathname", "value": "/run/r"},
              {"id": "url", "property": "search", "value": ""}]
    state = [{"id": "written-url", "property": "data", "value": None}]
    with open_store(url, read_only=True) as store:
        page = post_callback(create_app(store), "page.children", inputs, {"id": "page", "property": "children"},
                             state)
    said = json.dumps(page)
    assert "reference 'not-imported-yet' is not in the store (import it, or pick another)" in said
    # The runs table names it without a link that would lead nowhere.
    with open_store(url, read_only=True) as store:
        table = json.dumps(layout.runs_table(queries.overview(store)).to_plotly_json(), cls=PlotlyJSONEncoder)
    assert "not in the store" in table and "/run/not-imported-yet" not in table


def test_the_run_page_says_where_the_recipes_differ(tmp_path):
    """Below the alerts, the settings in which the run differs from the reference shown, read again
    when another reference is picked; with no reference, a line says there is none."""
    url = f"sqlite:///{tmp_path}/settings.db"
    configs = {"run": {"optimizer": {"lr": 3e-4}, "batch_size": 512, "seed": 1},
               "ref": {"optimizer": {"lr": 6e-4}, "batch_size": 512, "seed": 1},
               "twin": {"optimizer": {"lr": 3e-4}, "batch_size": 512, "seed": 1}}
    with open_store(url) as store:
        for name, config in configs.items():
            store.ensure_run(name, config=config, reference="ref" if name == "run" else None)
            store.write_metrics(name, pd.DataFrame({"step": [1, 2], "key": TRAIN_LOSS, "value": [3.0, 2.9]}))
    outputs = [[], [], {"id": "live", "property": "data"}, {"id": "resolution", "property": "children"},
               {"id": "notices", "property": "children"}, {"id": "settings", "property": "children"}]

    def settings_text(spec: dict) -> str:
        response = post_callback(app, "live.data", [{"id": "view", "property": "data", "value": {"spec": spec, "range": None}},
                                                    {"id": "refresh", "property": "data", "value": 0}], outputs)
        return json.dumps(response["settings"]["children"])

    with open_store(url, read_only=True) as store:
        app = create_app(store)
        shown = settings_text({"run": "run"})
        assert ("Settings that differ from ref: optimizer.lr 0.0003 vs 0.0006 given differently, 0 recorded by one "
                "run only (of 3)") in shown
        many = layout.settings_section(compare_settings({"lr": 1, "seed": 1, "batch_size": 8, "dropout": 0.1},
                                                        {"lr": 2, "seed": 2, "batch_size": 16}), "run", "ref")[0]
        assert many.children == ("Settings that differ from ref: lr 1 vs 2, batch_size 8 vs 16 and 1 more given "
                                 "differently, 1 recorded by one run only (of 4)")
        assert "Settings: the same 3 as twin" in settings_text({"run": "run", "reference": "twin"})
        assert "no reference to compare them with" in settings_text({"run": "run", "reference": ""})
