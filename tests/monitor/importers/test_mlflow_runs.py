"""MLflow's file store, written by MLflow itself (`mlflow.log_metrics` under `file:` tracking): a
run folder, an experiment or mlruns folder of one run, a resumed run, a run still running, and
the folders and lines that cannot be read."""

from __future__ import annotations

import math

import mlflow
import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load


def _loss(step: int) -> float:
    return 2.5 + 8.0 / math.sqrt(step + 1)


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    """MLflow tracking into tmp_path/mlruns, its file store allowed (MLflow 3 asks for a database)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    # set_experiment exports the experiment's id to the environment; later tests' MLflow runs
    # (a Trainer in a subprocess) would look for it in their own databases.
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", "")
    root = tmp_path / "mlruns"
    mlflow.set_tracking_uri(root.as_uri())
    mlflow.set_experiment("pretrain")
    yield root
    mlflow.set_tracking_uri(None)


def _log(steps, eval_every: int = 50) -> None:
    """What the Hugging Face Trainer's MLflow callback logs: its own names at the global step."""
    for s in steps:
        mlflow.log_metrics({"loss": _loss(s), "learning_rate": 3e-4, "grad_norm": 1.5}, step=s)
        if s % eval_every == 0:
            mlflow.log_metrics({"eval_loss": _loss(s) + 0.05, "eval_runtime": 2.0}, step=s)


def _folder(run) -> str:
    return run.info.artifact_uri.removeprefix("file://").removesuffix("/artifacts")


def test_a_run_folder_reads_every_metric_on_its_step(tracking):
    with mlflow.start_run(run_name="ref-run") as run:
        mlflow.log_params({"learning_rate": 3e-4, "per_device_train_batch_size": 8, "optim": "adamw_torch"})
        _log(range(10, 201, 10))
    folder = _folder(run)
    assert detect_format(folder) == "mlflow"
    imported = load(folder)
    assert imported.name_hint == "ref-run" and not imported.live
    data = imported.to_run_data("ref")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(10, 201, 10)) and loss[100] == pytest.approx(_loss(100))
    assert list(data.series(schema.heldout_key("eval")).index) == [50, 100, 150, 200]
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(3e-4)
    assert data.series(schema.TRAIN_GRAD_NORM).iloc[0] == pytest.approx(1.5)
    assert imported.config == {"learning_rate": 3e-4, "per_device_train_batch_size": 8, "optim": "adamw_torch"}
    assert imported.scalars["wall_time"].notna().all()  # MLflow stamps every value
    assert imported.attempts == 1 and not imported.events


def test_a_run_the_hugging_face_trainer_logged_reads_its_names_as_the_trainer_means_them(tracking):
    """Its MLflow callback logs the Trainer's own names with its TrainingArguments as params, and at
    the end the mean loss over the run as `train_loss`: no held-out set called train."""
    with mlflow.start_run(run_name="hf") as run:
        mlflow.log_params({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "logging_steps": 10})
        _log(range(10, 101, 10))
        mlflow.log_metrics({"train_loss": 3.1, "train_runtime": 60.0, "total_flos": 1e15}, step=100)
    imported = load(_folder(run))
    assert imported.profile == "hf"
    assert not any(k.startswith(schema.HELDOUT_PREFIX + "train") for k in imported.keys)
    data = imported.to_run_data("hf")
    assert list(data.series(schema.TRAIN_LOSS).dropna().index) == list(range(10, 101, 10))
    assert list(data.series(schema.heldout_key("eval")).dropna().index) == [50, 100]


def test_a_run_resumed_from_an_earlier_checkpoint_is_a_second_attempt(tracking):
    with mlflow.start_run(run_name="resumed") as run:
        _log(range(10, 101, 10))
    with mlflow.start_run(run_id=run.info.run_id):  # the job restarts from its step-60 checkpoint
        _log(range(70, 151, 10))
    imported = load(_folder(run))
    assert imported.attempts == 2
    (restart,) = imported.events
    assert restart["step"] == 70
    assert list(imported.to_run_data("r").series(schema.TRAIN_LOSS).index) == list(range(10, 151, 10))


def test_an_experiment_of_one_run_reads_it_and_one_of_two_asks_which(tracking):
    with mlflow.start_run(run_name="first") as first:
        _log(range(10, 51, 10))
    experiment = tracking / first.info.experiment_id
    assert load(experiment).name_hint == "first"
    with mlflow.start_run(run_name="second"):
        _log(range(10, 51, 10))
    with pytest.raises(GapwatchError, match=r"2 MLflow runs here: import one run folder: (first|second) "):
        load(tracking)


def test_a_run_still_running_is_live(tracking):
    run = mlflow.start_run(run_name="live")
    try:
        _log(range(10, 31, 10))
        assert load(_folder(run)).live
    finally:
        mlflow.end_run()


def test_a_damaged_metric_line_names_its_file_and_line(tracking):
    with mlflow.start_run(run_name="damaged") as run:
        _log(range(10, 31, 10))
    path = tracking / run.info.experiment_id / run.info.run_id / "metrics" / "loss"
    path.write_text(path.read_text() + "1700000000000 not-a-number 40\n")
    with pytest.raises(GapwatchError, match=r"metrics/loss: line 4: not 'timestamp value step'"):
        load(_folder(run))


def test_a_step_beyond_a_floats_precision_is_kept_exact(tracking):
    step = 2**60 + 1  # MLflow keeps steps as 64-bit integers; a float would round this one
    with mlflow.start_run(run_name="long") as run:
        mlflow.log_metric("loss", 2.0, step=step)
    assert list(load(_folder(run)).to_run_data("r").series(schema.TRAIN_LOSS).index) == [step]
