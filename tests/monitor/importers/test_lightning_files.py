"""The files a real `lightning.Trainer` writes through its own loggers (CSVLogger's metrics.csv,
TensorBoardLogger's event files and WandbLogger's offline run), read as someone else's reference
run (lightning_fit.py says what it logs): the per-step twin of the training loss is the training
loss, a validation loss per epoch the held-out loss, and a validation loss per batch, numbered by
validation batch below the training steps, neither a series on the step axis nor a restart."""

from __future__ import annotations

import pandas as pd
import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, import_source, load

from .conftest import offline_run_dir, run_writer
from .lightning_fit import EPOCHS, LOG_EVERY, STEPS, fit


@pytest.fixture(scope="module", params=[False, True], ids=["val per epoch", "val per step and epoch"])
def lightning_logs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning")
    fit([CSVLogger(root), TensorBoardLogger(root)], request.param)
    # WandbLogger in a process of its own: wandb keeps global state per process.
    run_writer(root, "lightning", int(request.param))
    return root, request.param


@pytest.mark.slow
@pytest.mark.parametrize("source", ["metrics.csv", "events", "wandb"])
def test_lightning_step_and_epoch_twins(lightning_logs, source):
    root, val_on_step = lightning_logs
    if source == "wandb":
        path = offline_run_dir(root)
    else:
        (path,) = (root.rglob("metrics.csv") if source == "metrics.csv"
                   else {p.parent for p in root.rglob("events.out.tfevents.*")})
    run = load(path)
    assert run.profile == "lightning"
    assert run.config["val_on_step"] is val_on_step  # the hyperparameters, the run's settings
    assert run.key_map["epoch"] == "train/epoch"
    # metrics.csv gives `epoch` twice, alike, at each epoch's last step: nothing to tell.
    assert not [n for n in run.notes if "the last value wins" in n]
    assert run.key_map["train_loss_step"] == schema.TRAIN_LOSS
    assert run.key_map["val_loss_epoch" if val_on_step else "val_loss"] == schema.heldout_key("val")
    assert run.key_map["lr-AdamW"] == schema.OPTIM_LR
    assert not run.key_map["train_loss_epoch"].startswith(("train/", "eval/"))  # an epoch's mean
    assert "val_loss_step" not in run.key_map
    assert run.attempts == 1 and not [e for e in run.events if e["kind"] == "restart"]
    data = run.to_run_data("lightning")
    assert len(data.series(schema.TRAIN_LOSS).dropna()) == STEPS // LOG_EVERY
    assert len(data.series(schema.heldout_key("val")).dropna()) == EPOCHS


@pytest.fixture(scope="module")
def csv_launches(tmp_path_factory):
    """CSVLogger folders of two launches each, as a real Trainer writes them: a run that got to
    step 99, crashed and was resumed from its checkpoint at step 50 (version_1), and a sweep of two
    runs from scratch."""
    resumed = tmp_path_factory.mktemp("resumed")
    fit([CSVLogger(resumed)], False, epochs=2, checkpoints=resumed / "ckpt")
    fit([CSVLogger(resumed)], False, ckpt_path=resumed / "ckpt" / "epoch=0-step=50.ckpt")
    sweep = tmp_path_factory.mktemp("sweep")
    for _ in range(2):
        fit([CSVLogger(sweep)], False)
    return resumed / "lightning_logs", sweep / "lightning_logs"


def test_a_csv_logger_version_folder_is_its_metrics_csv(csv_launches, sqlite_url):
    from app.cli import main
    from monitor.store import open_store

    folder = csv_launches[0] / "version_0"
    assert detect_format(folder) == "csv"
    run, log = load(folder), load(folder / "metrics.csv")
    pd.testing.assert_frame_equal(run.scalars, log.scalars)
    assert run.config == log.config and run.config["val_on_step"] is False  # hparams.yaml
    assert run.name_hint == "version_0"  # as TensorBoard's version folder is named
    assert main(["import", str(folder), "--run", "v0", "--store", sqlite_url]) == 0  # README's example
    with open_store(sqlite_url) as store:
        again, _ = import_source(store, "v0", folder / "metrics.csv")
        assert again.rows_total == len(log.scalars) and again.rows_new == 0  # one source, however named
        assert store.run_info("v0").config["val_on_step"] is False


def test_a_csv_logger_run_resumed_in_a_second_version_is_one_run(csv_launches):
    run = load(csv_launches[0])
    (restart,) = [e for e in run.events if e["kind"] == "restart"]
    assert run.attempts == 2 and restart["step"] == 50
    assert restart["payload"]["file"] == "version_1/metrics.csv"
    assert any("2 launches of one run" in n for n in run.notes)
    loss = run.to_run_data("resumed").series(schema.TRAIN_LOSS).dropna()  # the resumed attempt wins
    assert loss.index.min() < 50 and loss.index.max() == STEPS - 1
    assert len(loss) == STEPS // LOG_EVERY


def test_csv_logger_runs_of_a_sweep_are_refused_by_name(csv_launches):
    with pytest.raises(GapwatchError, match=r"a Lightning CSVLogger folder of 2 runs \(version_0, version_1\) "
                                            r"that are not one run resumed: import one run from its own folder"):
        load(csv_launches[1])
    assert load(csv_launches[1] / "version_1").name_hint == "version_1"
