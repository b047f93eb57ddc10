"""Malformed requests to a real dashboard server: each gets a 4xx and one log line, never a 500."""

from __future__ import annotations

import http.client
import json
import logging
import threading

import pandas as pd
import pytest

from app.dashboard.app import create_app
from app.dashboard.config import DashboardConfig
from app.dashboard.server import make_server
from monitor.schema import TRAIN_LOSS
from monitor.store import open_store

CALLBACK = "/_dash-update-component"
RUNS_TABLE = {"output": "runs-table.children", "outputs": {"id": "runs-table", "property": "children"},
              "inputs": [{"id": "poll", "property": "n_intervals", "value": None},
                         {"id": "url", "property": "pathname", "value": "/"}],
              "changedPropIds": [], "state": []}
PAGE = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
        "inputs": [{"id": "url", "property": "pathname", "value": "/"},
                   {"id": "url", "property": "search", "value": None}],
        "changedPropIds": [], "state": [{"id": "written-url", "property": "data", "value": None}]}


def without(body: dict, key: str) -> dict:
    return {k: v for k, v in body.items() if k != key}


MALFORMED_BODIES = {
    "null": "null",
    "a list": "[]",
    "a number": "5",
    "NaN": "NaN",
    "not JSON": "{",
    "empty": "",
    "no inputs": json.dumps(without(RUNS_TABLE, "inputs")),
    "no output": json.dumps(without(RUNS_TABLE, "output")),
    "unknown output": json.dumps({**RUNS_TABLE, "output": "nope.children"}),
    "output a number": json.dumps({**RUNS_TABLE, "output": 5}),
    "inputs null": json.dumps({**RUNS_TABLE, "inputs": None}),
    "inputs of numbers": json.dumps({**RUNS_TABLE, "inputs": [1, 2]}),
    "one input short": json.dumps({**RUNS_TABLE, "inputs": RUNS_TABLE["inputs"][:1]}),
    "outputs null": json.dumps({**RUNS_TABLE, "outputs": None}),
    "a browser-side callback": json.dumps({**RUNS_TABLE, "output": '{"name":["ALL"],"type":"panel"}.extendData'}),
    "1 MB": json.dumps({**RUNS_TABLE, "padding": "x" * 1_000_000}),
    "nested 100k deep": "[" * 100_000 + "]" * 100_000,
    "pathname 5": json.dumps({**PAGE, "inputs": [{"id": "url", "property": "pathname", "value": 5},
                                                 PAGE["inputs"][1]]}),
    "pathname NaN": json.dumps({**PAGE, "inputs": [{"id": "url", "property": "pathname", "value": float("nan")},
                                                   PAGE["inputs"][1]]}),
}
TRAVERSALS = ["/_dash-component-suites/../../etc/passwd", "/_dash-component-suites/dash/../../../../etc/passwd",
              "/_dash-component-suites/%2e%2e/%2e%2e/etc/passwd", "/_dash-component-suites/dash/..%2f..%2fapp.py",
              "/_dash-component-suites/nope/x.js", "/_dash-component-suites/dash/nope.js"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'store.db'}"
    with open_store(url) as store:
        store.ensure_run("r")
        store.write_metrics("r", pd.DataFrame({"step": [0, 1], "key": TRAIN_LOSS, "value": [1.0, 2.0]}))
    store = open_store(url, read_only=True)
    config = DashboardConfig(store_url=url, port=0)
    served = make_server(create_app(store, config), config)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    yield int(served.effective_port)
    served.close()
    store.close()


def request(port: int, method: str, path: str, body: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body is not None else {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def guard_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gapwatch.dashboard"]


@pytest.mark.parametrize("name", MALFORMED_BODIES)
def test_malformed_callback_bodies_get_4xx_and_one_log_line(server, caplog, name):
    caplog.set_level(logging.WARNING, logger="gapwatch.dashboard")
    status, _ = request(server, "POST", CALLBACK, MALFORMED_BODIES[name])
    assert 400 <= status < 500, name
    lines = guard_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith(f"{status} POST '{CALLBACK}'"), lines


@pytest.mark.parametrize("path", TRAVERSALS)
def test_files_outside_the_component_bundles_are_404(server, caplog, path):
    caplog.set_level(logging.WARNING, logger="gapwatch.dashboard")
    status, body = request(server, "GET", path)
    assert status == 404 and b"root:" not in body
    assert len(guard_lines(caplog)) == 1


def test_well_formed_requests_still_work(server, caplog):
    caplog.set_level(logging.WARNING, logger="gapwatch.dashboard")
    status, body = request(server, "POST", CALLBACK, json.dumps(RUNS_TABLE))
    assert status == 200 and b'"r"' in body
    status, body = request(server, "POST", CALLBACK, json.dumps(PAGE))
    assert status == 200
    status, _ = request(server, "GET", "/_dash-component-suites/dash/deps/react@18.3.1.min.js")
    assert status == 200
    assert guard_lines(caplog) == []
