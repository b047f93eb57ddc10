"""The Lightning integration on a real `lightning.Trainer`: a small regression model on CPU, 30 steps,
logging every 5, validating and checkpointing every 10; then resumed from its step-20 checkpoint."""

from __future__ import annotations

from argparse import Namespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from monitor.client import MonitorSettings
from monitor.integrations.lightning import GapwatchLogger
from monitor.store import open_store

from .pair_checks import checkpoints_and_repeats, detect_needs_no_mapping


class Regression(L.LightningModule):
    """Logs its losses under `<stage>_loss` or, with `slashes`, `<stage>/loss`: both are gapwatch's."""

    def __init__(self, lr: float = 0.05, slashes: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(8, 1)
        self.sep = "/" if slashes else "_"

    def training_step(self, batch, index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log(f"train{self.sep}loss", loss)
        return loss

    def validation_step(self, batch, index):
        x, y = batch
        self.log(f"val{self.sep}loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def loaders(learnable: bool):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 8, generator=gen)
    y = x.sum(1, keepdim=True) if learnable else torch.randn(400, 1, generator=gen) * 3
    return DataLoader(TensorDataset(x, y), batch_size=4), DataLoader(TensorDataset(x[:32], y[:32]), batch_size=8)


def fit(logger: GapwatchLogger, checkpoints, learnable: bool, slashes: bool, ckpt_path=None) -> None:
    torch.manual_seed(0)
    trainer = L.Trainer(max_steps=30, log_every_n_steps=5, val_check_interval=10, limit_val_batches=2,
                        num_sanity_val_steps=0, logger=logger, accelerator="cpu", enable_progress_bar=False,
                        enable_model_summary=False,
                        callbacks=[ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=10, save_top_k=-1),
                                   LearningRateMonitor()])
    train, val = loaders(learnable)
    trainer.fit(Regression(slashes=slashes), train, val, ckpt_path=ckpt_path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning")
    url = f"sqlite:///{root / 'store.db'}"

    def logger(run: str, reference: str | None = None) -> GapwatchLogger:
        return GapwatchLogger(run, url, reference=reference,
                              settings=MonitorSettings(spool_dir=root / "spool", flush_interval_s=0.2))

    fit(logger("ref"), root / "ref", learnable=True, slashes=True)
    fit(logger("cand", "ref"), root / "cand", learnable=False, slashes=False)
    fit(logger("cand", "ref"), root / "cand", learnable=False, slashes=False,
        ckpt_path=str(root / "cand" / "epoch=0-step=20.ckpt"))
    return url, root


def test_the_module_s_names_land_at_the_trainer_s_steps(runs):
    url, _ = runs
    with open_store(url) as store:
        cand, ref = store.load_run("cand"), store.load_run("ref")
        info = store.get_run("cand")
    for data in (cand, ref):  # train_loss/val_loss and train/loss/val/loss alike
        logged = data.scalars
        assert logged["train/loss"].dropna().index.tolist() == [5, 10, 15, 20, 25, 30]
        assert logged["eval/heldout/val/loss"].dropna().index.tolist() == [10, 20, 30]
        assert logged["optim/lr"].dropna().tolist() == [0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125]
        assert set(logged.columns) == {"train/loss", "eval/heldout/val/loss", "optim/lr", "data/epoch"}
    assert ref.scalars["eval/heldout/val/loss"].iloc[-1] < cand.scalars["eval/heldout/val/loss"].iloc[-1]
    assert info["config"] == {"lr": 0.05, "slashes": False} and info["reference"] == "ref"


def test_each_checkpoint_is_an_event_and_a_resumed_fit_a_new_attempt(runs):
    url, root = runs
    events = checkpoints_and_repeats(url)
    checkpoints = events[events["kind"] == "checkpoint"]
    assert checkpoints["payload"].iloc[1]["path"] == str(root / "cand" / "epoch=0-step=20.ckpt")


def test_detect_judges_the_run_against_its_reference_without_a_mapping(runs):
    detect_needs_no_mapping(runs[0])


def test_a_failed_fit_closes_its_attempt_as_crashed(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    logger = GapwatchLogger("r", url, settings=MonitorSettings(spool_dir=tmp_path / "spool"))
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"train_loss": 1.0, "custom_metric": 2.0}, step=0)
    logger.finalize("failed")
    with open_store(url) as store:
        assert store.get_run("r")["status"] == "crashed"
        assert store.load_run("r").scalars.loc[1].to_dict() == {"train/loss": 1.0, "extra/custom_metric": 2.0}


def test_hyperparameters_in_a_namespace_become_the_config(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    logger = GapwatchLogger("r", url, config={"seed": 3}, settings=MonitorSettings(spool_dir=tmp_path / "spool"))
    logger.log_hyperparams(Namespace(lr=0.1, schedule=torch.optim.lr_scheduler.StepLR))
    logger.log_metrics({"val/c4/loss": 2.0, "lr-AdamW": 0.1}, step=9)
    logger.finalize("success")
    with open_store(url) as store:
        run = store.get_run("r")
        assert run["config"] == {"lr": 0.1, "schedule": str(torch.optim.lr_scheduler.StepLR), "seed": 3}
        assert store.load_run("r").scalars.loc[10].to_dict() == {"eval/heldout/c4/loss": 2.0, "optim/lr": 0.1}
