"""Runs on an MLflow tracking server, named by their page's URL as the browser shows it: a run's,
`http://host:5000/#/experiments/<experiment>/runs/<run id>` (anything after the run id, a tab's
name, is ignored), or an experiment's, `http://host:5000/#/experiments/<experiment>`, whose runs
are picked as a database's are: by name (by id where two share one) with --run, each with
--all-runs, and the one it holds with neither. Whatever database the server keeps its runs in
(PostgreSQL, MySQL, ...), its REST API serves them the same way.

Read through the server's REST API (`runs/search` for an experiment's runs, `runs/get` for a run,
`metrics/get-history` page by page for each metric), with no MLflow installed, as the file store and the SQLite database are
(`mlflow_runs`, `mlflow_db`), and under their rules: values replayed in the order they were logged,
params as the config, a run the Hugging Face Trainer logged read with its names, a RUNNING run
live, a FAILED or KILLED one said to have ended so. A server that asks for credentials gets them
as MLflow's own client sends them: `MLFLOW_TRACKING_TOKEN` (a bearer token), else
`MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .formats import Format, ReadOptions
from .imported_run import ImportedRun
from .input_checks import setting, unreachable
from .mlflow_runs import ended_notes, replayed, trainer_names

SCHEMES = ("http://", "https://")
_PAGE = re.compile(r"(?P<base>https?://[^#?]+?)/*#/experiments/(?P<experiment>[^/?]+)"
                   r"(?:/runs/(?P<run>[0-9A-Za-z_-]+))?(?:[/?].*)?")
PAGE_SIZE = 25_000  # values of a metric a request (the most MLflow's server hands out at once)
RUNS_PAGE_SIZE = 1_000  # runs of an experiment a request
TIMEOUT_S = 30.0  # one request; a server that answers answers far faster


def is_mlflow_page(url: str) -> bool:
    return _PAGE.fullmatch(url.strip()) is not None


def parse_url(url: str) -> tuple[str, str, str | None]:
    """(the server's base URL, the experiment id, the run id or None) of a page's URL."""
    found = _PAGE.fullmatch(url.strip())
    if found is None:
        raise GapwatchError(f"{url}: an http(s) source is read as an MLflow run's or experiment's page, "
                            "http://host:port/#/experiments/<experiment>[/runs/<run id>] (for W&B: "
                            "wandb://entity/project/run_id)")
    return found["base"], found["experiment"], found["run"]


def _experiment_runs(base: str, experiment: str) -> list[tuple[str, str]]:
    """(run id, name to pick it by) of each run of an experiment that is not deleted: its name, or
    its id where another run has the same name or it has none."""
    found, token = [], None
    while True:
        body = {"experiment_ids": [experiment], "max_results": RUNS_PAGE_SIZE, "run_view_type": "ACTIVE_ONLY"}
        if token:
            body["page_token"] = token
        page = _call(base, "runs/search", body=body)
        try:
            found += [(str(r["info"]["run_id"]), r["info"].get("run_name")) for r in page.get("runs", [])]
        except (KeyError, TypeError, AttributeError):
            raise GapwatchError(f"MLflow server {base}: runs/search answered runs without their ids") from None
        token = page.get("next_page_token")
        if not token:
            break
    names = [name for _, name in found]
    return [(rid, name if name and names.count(name) == 1 else rid) for rid, name in found]


def server_runs(url: str) -> list[str]:
    """The names an experiment page's runs are picked by; [] for a run's page (one run)."""
    base, experiment, run_id = parse_url(url)
    return [] if run_id else [name for _, name in _experiment_runs(base, experiment)]


def _chosen(url: str, base: str, experiment: str, wanted: str | None) -> str:
    """The id of the run of an experiment page that is imported."""
    runs = _experiment_runs(base, experiment)
    if wanted is not None:
        chosen = [rid for rid, name in runs if wanted in (rid, name)]
        if not chosen:
            raise GapwatchError(f"{url}: no MLflow run {wanted!r} in the experiment "
                                f"(runs: {', '.join(name for _, name in runs[:10])})")
        return chosen[0]
    if len(runs) != 1:
        listed = ", ".join(name for _, name in runs[:10]) + (" ..." if len(runs) > 10 else "")
        raise GapwatchError(f"{url}: {len(runs)} MLflow runs in the experiment ({listed}): import one with "
                            "--run NAME, or each with --all-runs")
    return runs[0][0]


def parse_mlflow_server(url: str, options: ReadOptions = ReadOptions()) -> ImportedRun:
    base, experiment, run_id = parse_url(url)
    run_id = run_id or _chosen(url, base, experiment, options.source_run)
    run = _call(base, "runs/get", {"run_id": run_id}).get("run")
    if not isinstance(run, dict):
        raise GapwatchError(f"MLflow server {base}: runs/get answered no run")
    info, data = run.get("info", {}), run.get("data", {})
    if info.get("lifecycle_stage") == "deleted":
        raise GapwatchError(f"{url}: the run is deleted on the MLflow server")
    try:
        keys = sorted({str(m["key"]) for m in data.get("metrics", [])})
        params = {str(p["key"]): setting(str(p.get("value", ""))) for p in data.get("params", [])}
    except (KeyError, TypeError, AttributeError):
        raise GapwatchError(f"MLflow server {base}: runs/get answered a run not as MLflow writes one") from None
    if not keys:
        raise GapwatchError(f"{url}: the MLflow run logged no metric values: nothing to import")
    pages = []  # (codes, times, steps, values) of each page, as arrays: a long run's values held compactly
    for code, key in enumerate(keys):
        pages += [_arrays(base, page, code) for page in _history(base, run_id, key)]
        if options.progress is not None:
            options.progress(code + 1, len(keys))
    if not pages:
        raise GapwatchError(f"{url}: the MLflow server holds no values of the run's metrics: nothing to import")
    codes, times, steps, values = (np.concatenate(column) for column in zip(*pages))
    if steps.min() < 0 or steps.max() > MAX_STEP:
        raise GapwatchError(f"{url}: the MLflow run logged a step outside 0..{MAX_STEP}")
    logged = replayed(trainer_names(keys, params), codes, times, steps, values)
    status = info.get("status")
    name = info.get("run_name") or run_id
    return ImportedRun(name_hint=name, scalars=logged.scalars(with_wall_time=True), events=logged.events,
                       source=f"{base}/#/experiments/{info.get('experiment_id', '0')}/runs/{run_id}", config=params,
                       notes=ended_notes(f"{url}: run {name!r}", status), live=status == "RUNNING")


def _history(base: str, run_id: str, key: str):
    """Every value of one metric, a page (a list of MLflow's metric objects) at a time."""
    token = None
    while True:
        query = {"run_id": run_id, "metric_key": key, "max_results": PAGE_SIZE}
        if token:
            query["page_token"] = token
        page = _call(base, "metrics/get-history", query)
        if page.get("metrics"):
            yield page["metrics"]
        token = page.get("next_page_token")
        if not token:
            return


def _arrays(base: str, page: list, code: int) -> tuple[np.ndarray, ...]:
    """(codes, timestamps, steps, values) of one page of a metric's history."""
    try:
        return (np.full(len(page), code), np.array([float(m.get("timestamp", 0)) for m in page]),
                np.array([int(m.get("step", 0)) for m in page], dtype=np.int64),
                np.array([_value(m.get("value")) for m in page]))
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise GapwatchError(f"MLflow server {base}: metrics/get-history answered values not as MLflow "
                            "writes them") from None


def _value(raw) -> float:
    """A value as the REST API writes it: a number, or "NaN", "Infinity", "-Infinity"."""
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


def _call(base: str, endpoint: str, query: dict | None = None, body: dict | None = None) -> dict:
    """One call of MLflow's REST API: a GET with `query`, or a POST of `body` as JSON; each way it
    can fail is one clear error."""
    url = f"{base}/api/2.0/mlflow/{endpoint}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = None if body is None else json.dumps(body).encode()
    headers = _auth() | ({"Content-Type": "application/json"} if data is not None else {})
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise GapwatchError(f"MLflow server {base}: {endpoint} answered HTTP {exc.code}: {_why(exc)}") from None
    except urllib.error.URLError as exc:
        raise GapwatchError(f"MLflow server {base} is unreachable: {unreachable(exc.reason, TIMEOUT_S)}") from None
    except TimeoutError as exc:
        raise GapwatchError(f"MLflow server {base} is unreachable: {unreachable(exc, TIMEOUT_S)}") from None
    except ValueError:
        raise GapwatchError(f"MLflow server {base}: {endpoint} answered with something that is not JSON") from None
    if not isinstance(answer, dict):
        raise GapwatchError(f"MLflow server {base}: {endpoint} answered JSON that is not an object")
    return answer


def _why(exc: urllib.error.HTTPError) -> str:
    """The server's own message (MLflow answers errors as {"error_code", "message"})."""
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        body = {}
    if exc.code in (401, 403):
        return ("it asks for credentials: set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD")
    return str(body.get("message") or exc.reason)


def _auth() -> dict[str, str]:
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


FORMAT = Format("mlflow-server", parse_mlflow_server, url_scheme=SCHEMES, runs=server_runs)
