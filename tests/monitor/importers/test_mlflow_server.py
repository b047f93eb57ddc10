"""A run on an MLflow tracking server, imported from its page's URL (monitor/importers/
mlflow_server.py): MLflow's own server (its Flask app, on a SQLite database) on loopback, the runs
logged into it by MLflow's own client."""

from __future__ import annotations

import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load, mlflow_server
from monitor.store import open_store


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """MLflow's tracking server on 127.0.0.1 (one a module: the server keeps its store once made)."""
    folder = tmp_path_factory.mktemp("mlflow")
    with pytest.MonkeyPatch.context() as env:
        # Where `mlflow server` tells its app to keep the runs.
        env.setenv("_MLFLOW_SERVER_FILE_STORE", f"sqlite:///{folder / 'mlflow.db'}")
        env.setenv("_MLFLOW_SERVER_ARTIFACT_ROOT", str(folder / "artifacts"))
        env.setenv("_MLFLOW_SERVER_SERVE_ARTIFACTS", "false")
        from mlflow.server import app
        from werkzeug.serving import make_server

        http = make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(target=http.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{http.server_port}"
        http.shutdown()
        thread.join(timeout=10)


def _log_run(server: str, name: str, steps: int = 120, status: str = "FINISHED", experiment: str = "refs") -> str:
    """A run logged by MLflow's client: the loss every step (a NaN at step 50), an evaluation every
    40 steps, two params; its page's URL."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(server)
    experiment = (client.get_experiment_by_name(experiment)
                  or client.get_experiment(client.create_experiment(experiment)))
    run = client.create_run(experiment.experiment_id, run_name=name)
    rid = run.info.run_id
    metrics = [Metric("train_loss", math.nan if s == 50 else 3 - s / 100, 1_700_000_000_000 + s, s)
               for s in range(steps)]
    metrics += [Metric("val_loss", 3.1 - s / 100, 1_700_000_000_000 + s, s) for s in range(0, steps, 40)]
    for part in range(0, len(metrics), 1000):
        client.log_batch(rid, metrics=metrics[part:part + 1000],
                         params=[Param("lr", "0.0006"), Param("batch_size", "64")] if part == 0 else [])
    client.set_terminated(rid, status)
    return f"{server}/#/experiments/{experiment.experiment_id}/runs/{rid}"


def test_a_run_page_url_imports_the_run(server):
    url = _log_run(server, "ref-seed1")
    assert detect_format(url) == "mlflow-server"
    done = []
    run = load(url, progress=lambda *a: done.append(a))
    assert run.name_hint == "ref-seed1" and run.config == {"lr": 0.0006, "batch_size": 64}
    data = run.to_run_data("ref")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(120)) and math.isnan(loss[50]) and loss[119] == pytest.approx(1.81)
    assert data.series("eval/heldout/val/loss").to_dict() == {0: pytest.approx(3.1), 40: pytest.approx(2.7),
                                                                80: pytest.approx(2.3)}
    assert not run.live and not run.notes
    assert done[-1] == (2, 2)  # a line of progress a metric read


def test_every_page_of_a_long_history_is_read(server, monkeypatch):
    monkeypatch.setattr(mlflow_server, "PAGE_SIZE", 50)
    url = _log_run(server, "long", steps=230)
    assert len(load(url).to_run_data("long").series(schema.TRAIN_LOSS)) == 230


def test_a_failed_run_is_said_to_have_ended_so_and_a_running_one_is_live(server):
    assert any("FAILED" in n for n in load(_log_run(server, "died", status="FAILED")).notes)
    assert load(_log_run(server, "going", status="RUNNING")).live


def test_each_way_a_server_fails_is_one_clear_error(server):
    with pytest.raises(GapwatchError, match="answered HTTP 404: .*"):
        load(f"{server}/#/experiments/0/runs/0123456789abcdef0123456789abcdef")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(GapwatchError, match="unreachable: connection refused"):
        load(f"http://127.0.0.1:{port}/#/experiments/0/runs/abc")
    with pytest.raises(GapwatchError, match="read as an MLflow run's or experiment's page.*wandb://"):
        load("https://wandb.ai/entity/project/runs/abc123")


def test_gapwatch_import_takes_the_page_pasted_from_the_browser(server, sqlite_url, capsys):
    url = _log_run(server, "pasted") + "/model-metrics"  # the tab the page was open on
    assert main(["import", url, "--store", sqlite_url]) == 0
    assert "created run 'pasted' (the source's name" in capsys.readouterr().err
    with open_store(sqlite_url) as store:
        assert len(store.read_scalars("pasted", [schema.TRAIN_LOSS], max_points=1000)) == 120


def test_an_experiment_page_picks_its_runs_as_a_database_does(server, sqlite_url, capsys):
    one = _log_run(server, "only", experiment="alone")
    page = one.split("/runs/")[0]
    assert load(page).name_hint == "only"  # an experiment of one run needs no --run
    seed1 = _log_run(server, "seed1", experiment="seeds")
    _log_run(server, "seed2", steps=80, experiment="seeds")
    page = seed1.split("/runs/")[0]
    assert sorted(mlflow_server.server_runs(page)) == ["seed1", "seed2"]
    with pytest.raises(GapwatchError, match="2 MLflow runs in the experiment .*--all-runs"):
        load(page)
    assert len(load(page, source_run="seed2").to_run_data("s").series(schema.TRAIN_LOSS)) == 80
    assert main(["import", page, "--all-runs", "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        assert {"seed1", "seed2"} <= set(store.list_runs()["name"])


RUN = {"run": {"info": {"run_id": "r1", "run_name": "r1", "status": "FINISHED", "experiment_id": "0"},
               "data": {"metrics": [{"key": "loss", "value": 1.0, "timestamp": 0, "step": 1}], "params": []}}}


@pytest.mark.parametrize("answers, message", [
    ({"runs/get": (200, b"<html>login</html>")}, "runs/get answered with something that is not JSON"),
    ({"runs/get": (200, b"[1, 2]")}, "runs/get answered JSON that is not an object"),
    ({"runs/get": (200, b'{"run": {"data": {"metrics": [{"value": 1}]}}}')}, "a run not as MLflow writes one"),
    ({"runs/get": (200, json.dumps(RUN).encode()),
      "metrics/get-history": (200, b'{"metrics": [{"key": "loss", "value": 1, "step": "one"}]}')},
     "get-history answered values not as MLflow writes them"),
    ({"runs/get": (500, b'{"error_code": "INTERNAL_ERROR", "message": "database is locked"}')},
     "runs/get answered HTTP 500: database is locked"),
    ({"runs/get": (401, b"")}, "set MLFLOW_TRACKING_TOKEN"),
], ids=["html", "list", "no-key", "bad-step", "500", "401"])
def test_a_server_that_answers_wrongly_is_one_clear_error(answers, message):
    class Answers(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            endpoint = self.path.split("/api/2.0/mlflow/")[-1].split("?")[0]
            status, body = answers.get(endpoint, (404, b"{}"))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        with pytest.raises(GapwatchError, match=message):
            load(f"http://127.0.0.1:{http.server_port}/#/experiments/0/runs/r1")
    finally:
        http.shutdown()
