"""The files a real `lightning.Trainer` writes through its own loggers (CSVLogger's metrics.csv,
TensorBoardLogger's event files and WandbLogger's offline run), read as someone else's reference
run (lightning_fit.py says what it logs): the per-step twin of the training loss is the training
loss, a validation loss per epoch the held-out loss, and a validation loss per batch, numbered by
validation batch below the training steps, neither a series on the step axis nor a restart."""

from __future__ import annotations

import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from monitor import schema
from monitor.importers import load

from .conftest import offline_run_dir, run_writer
from .lightning_fit import EPOCHS, LOG_EVERY, STEPS, fit


@pytest.fixture(scope="module", params=[False, True], ids=["val per epoch", "val per step and epoch"])
def lightning_logs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning")
    fit([CSVLogger(root), TensorBoardLogger(root)], request.param)
    # WandbLogger in a process of its own: wandb keeps global state per process.
    run_writer(root, "lightning", int(request.param))
    return root, request.param


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
