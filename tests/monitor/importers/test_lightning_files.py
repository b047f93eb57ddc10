"""The files a real `lightning.Trainer` writes through its own loggers (CSVLogger's metrics.csv and
TensorBoardLogger's event files), read as someone else's reference run: a loss logged both per step
and per epoch (`self.log(..., on_step=True, on_epoch=True)`) is stored by Lightning as name_step and
name_epoch, a validation loss (per epoch, Lightning's default there) under its own name, and
LearningRateMonitor logs `lr-<optimizer>`."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

from monitor import schema
from monitor.importers import load


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, index):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, index):
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


@pytest.fixture(scope="module")
def lightning_logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning")
    torch.manual_seed(0)
    x = torch.randn(200, 8)
    train = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    val = DataLoader(TensorDataset(x[:32], x[:32].sum(1, keepdim=True)), batch_size=8)
    trainer = L.Trainer(max_epochs=3, log_every_n_steps=5, limit_val_batches=2, num_sanity_val_steps=0,
                        logger=[CSVLogger(root), TensorBoardLogger(root)], callbacks=[LearningRateMonitor()],
                        accelerator="cpu", enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regression(), train, val)
    return root


@pytest.mark.parametrize("source", ["metrics.csv", "events"])
def test_lightning_step_and_epoch_twins(lightning_logs, source):
    (path,) = (lightning_logs.rglob("metrics.csv") if source == "metrics.csv"
               else {p.parent for p in lightning_logs.rglob("events.out.tfevents.*")})
    run = load(path)
    assert run.key_map["train_loss_step"] == schema.TRAIN_LOSS
    assert run.key_map["val_loss"] == schema.heldout_key("val")
    assert run.key_map["lr-AdamW"] == schema.OPTIM_LR
    # The training loss's mean over each epoch keeps its own name.
    assert not run.key_map["train_loss_epoch"].startswith(("train/", "eval/"))
    assert run.attempts == 1
    data = run.to_run_data("lightning")
    assert len(data.series(schema.TRAIN_LOSS).dropna()) == 30  # 150 steps, logged every 5
    assert len(data.series(schema.heldout_key("val")).dropna()) == 3  # one per epoch
