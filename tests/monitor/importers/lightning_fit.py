"""A small real `lightning.Trainer` run for the importer tests: 150 steps of a regression model on
CPU, logging every 5 steps through the loggers given. The training loss is logged per step and per
epoch (`on_step=True, on_epoch=True`: Lightning stores train_loss_step and train_loss_epoch), the
validation loss once per epoch (Lightning's default there, under its own name) or, with
`val_on_step`, per validation batch too (val_loss_step, numbered by validation batch, and
val_loss_epoch); LearningRateMonitor logs `lr-AdamW`."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

STEPS, LOG_EVERY, EPOCHS = 150, 5, 3


class Regression(L.LightningModule):
    def __init__(self, val_on_step: bool) -> None:
        super().__init__()
        self.save_hyperparameters()  # the loggers write them (hparams.yaml, W&B's config)
        self.net = torch.nn.Linear(8, 1)
        self.val_on_step = val_on_step

    def training_step(self, batch, index):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, index):
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("val_loss", loss, on_step=self.val_on_step, on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def fit(loggers: list, val_on_step: bool, epochs: int = EPOCHS, checkpoints: Path | None = None,
        ckpt_path: Path | None = None) -> None:
    """checkpoints: keep a checkpoint of every epoch there (`epoch=0-step=50.ckpt`, ...);
    ckpt_path: resume from that checkpoint, as a job relaunched after a crash does."""
    torch.manual_seed(0)
    x = torch.randn(STEPS // EPOCHS * 4, 8)
    train = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    val = DataLoader(TensorDataset(x[:32], x[:32].sum(1, keepdim=True)), batch_size=8)
    kept = [ModelCheckpoint(dirpath=checkpoints, save_top_k=-1)] if checkpoints else []
    trainer = L.Trainer(max_epochs=epochs, log_every_n_steps=LOG_EVERY, limit_val_batches=2, num_sanity_val_steps=0,
                        logger=loggers, callbacks=[LearningRateMonitor(), *kept], accelerator="cpu",
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regression(val_on_step), train, val, ckpt_path=ckpt_path)
