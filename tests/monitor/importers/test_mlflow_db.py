"""MLflow's database store (SQLite), what MLflow 3 tracks into unless told otherwise: written by the
Hugging Face Trainer's own MLflow callback in a real Trainer run (hf_trainer_console.py), and by
MLflow's client for the cases a run of one's own meets (several runs, a resumed run, NaN and
infinities, a failed or deleted run). Before, `mlflow.db` was an unrecognised file."""

from __future__ import annotations

import math

import pytest
from mlflow import MlflowClient

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load
from monitor.importers.hf_trainer_state import source_name
from monitor.store import open_store


def test_the_trainers_mlflow_run_lands_on_its_steps_with_its_meaning(trainer_console):
    log, logged = trainer_console
    db = log.parent / "mlflow.db"
    assert detect_format(db) == "mlflow-db"
    run = load(db)
    assert run.name_hint == "tiny-gpt2" and run.profile == "hf" and not run.live
    truth = {(e["step"], source_name(k)): float(v) for e in logged for k, v in e["logs"].items()
             if isinstance(v, (int, float))}
    data = run.to_run_data("t")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(5, 61, 5))
    assert all(v == pytest.approx(truth[(s, "train/loss")]) for s, v in loss.items())
    assert list(data.series(schema.heldout_key("eval")).dropna().index) == [20, 40, 60]
    # The mean over the run the Trainer logs at its end is no series; its arguments are the config.
    assert "train/train_loss" not in run.key_map and run.config["per_device_train_batch_size"] == 4


def _client(path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{path}")


def _log(client: MlflowClient, run_id: str, steps, start_ms: int, offset: float = 0.0) -> None:
    for i, step in enumerate(steps):
        client.log_metric(run_id, "loss", 3.0 + offset + 10 / step, timestamp=start_ms + i, step=step)


def test_a_database_of_several_runs_imports_the_one_named_or_each(tmp_path, sqlite_url):
    db = tmp_path / "mlflow.db"
    client = _client(db)
    ids = {}
    for name, offset in (("adamw", 0.0), ("muon", -0.1), ("muon", -0.2), ("gone", 1.0)):
        run = client.create_run("0", run_name=name)
        ids.setdefault(name, []).append(run.info.run_id)
        _log(client, run.info.run_id, range(1, 21), 1_000, offset)
        client.set_terminated(run.info.run_id)
    client.delete_run(ids["gone"][0])
    twin = ids["muon"][1]
    # Two runs called muon are picked by their ids; the deleted run is not offered.
    with pytest.raises(GapwatchError, match=rf"3 MLflow runs here \(adamw, {ids['muon'][0]}, {twin}\)"):
        load(db)
    assert load(db, source_run=twin).to_run_data("m").series(schema.TRAIN_LOSS).loc[10] == pytest.approx(3.8)
    assert main(["import", str(db), "--run", "adamw", "--store", sqlite_url]) == 0
    assert main(["import", str(db), "--all-runs", "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        assert sorted(store.list_runs()["name"]) == sorted(["adamw", *ids["muon"]])


def test_one_run_of_a_database_is_followed_while_mlflow_tracks_into_it(tmp_path, sqlite_url):
    """`import --follow --run NAME`: a job still training into a database of several runs."""
    db = tmp_path / "mlflow.db"
    client = _client(db)
    for name in ("old", "live"):
        run_id = client.create_run("0", run_name=name).info.run_id
        _log(client, run_id, range(1, 11), 1_000)
    assert main(["import", str(db), "--run", "live", "--follow", "--poll-interval", "0.01",
                 "--idle-timeout", "0.05", "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        assert list(store.list_runs()["name"]) == ["live"]
        assert store.load_run("live").scalars.index.max() == 10


def test_a_resumed_run_nan_infinity_and_a_failure_are_what_was_logged(tmp_path):
    db = tmp_path / "mlflow.db"
    client = _client(db)
    run_id = client.create_run("0", run_name="resumed").info.run_id
    _log(client, run_id, range(1, 31), 1_000)
    _log(client, run_id, range(21, 41), 2_000, offset=0.01)  # resumed from the checkpoint at 20
    client.log_metric(run_id, "loss", math.nan, timestamp=3_000, step=41)
    client.log_metric(run_id, "loss", math.inf, timestamp=3_001, step=42)
    client.set_terminated(run_id, status="FAILED")
    run = load(db)
    assert run.attempts == 2 and [(e["kind"], e["step"]) for e in run.events] == [("restart", 21)]
    loss = run.to_run_data("r").series(schema.TRAIN_LOSS)
    assert loss.loc[25] == pytest.approx(3.01 + 10 / 25)
    assert math.isnan(loss.loc[41]) and loss.loc[42] == math.inf
    assert any("MLflow marks the run FAILED" in n for n in run.notes)


def test_a_gapwatch_store_is_not_taken_for_mlflows(tmp_path):
    path = tmp_path / "gapwatch.db"
    with open_store(f"sqlite:///{path}"):
        pass
    with pytest.raises(GapwatchError, match="unrecognised format"):
        detect_format(path)
