"""The Accelerate integration on a real `Accelerator`: a custom loop on CPU, a small regression model,
30 steps, logging the training loss every 5 steps and a held-out loss every 10 with
`accelerator.log`; a reference and a candidate, compared by `gapwatch detect` without a mapping."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from monitor.client import MonitorSettings, NullMonitor
from monitor.integrations.accelerate import GapwatchTracker
from monitor.store import open_store

from .pair_checks import detect_needs_no_mapping


def train(tracker: GapwatchTracker, learnable: bool) -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 8, generator=gen)
    y = x.sum(1, keepdim=True) if learnable else torch.randn(400, 1, generator=gen) * 3
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("regression", config={"learning_rate": 0.05, "batch_size": 4})
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(TensorDataset(x, y), batch_size=4))
    for step, (xb, yb) in enumerate(loader, start=1):
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        if step % 5 == 0:
            accelerator.log({"train_loss": loss.item(), "lr": 0.05, "phase": "warm"}, step=step)
        if step % 10 == 0:
            with torch.no_grad():
                accelerator.log({"eval_loss": torch.nn.functional.mse_loss(model(x[:32]), y[:32])}, step=step)
        if step == 30:
            break
    accelerator.end_training()


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("accelerate")
    url = f"sqlite:///{folder / 'store.db'}"
    settings = MonitorSettings(spool_dir=folder / "spool")
    train(GapwatchTracker("ref", url, settings=settings), learnable=True)
    train(GapwatchTracker("cand", url, reference="ref", settings=settings), learnable=False)
    return url


def test_a_loop_under_accelerate_logs_its_run_under_gapwatchs_names(pair):
    with open_store(pair) as store:
        cand = store.load_run("cand")
        info = store.get_run("cand")
    assert info["status"] == "finished" and info["reference"] == "ref" and info["attempts"] == 1
    assert info["config"]["learning_rate"] == 0.05 and info["config"]["batch_size"] == 4  # init_trackers' config
    assert list(cand.series("train/loss").index) == [5, 10, 15, 20, 25, 30]
    assert list(cand.series("eval/heldout/val/loss").index) == [10, 20, 30]  # a tensor's value, at its step
    assert list(cand.series("optim/lr")) == [0.05] * 6
    assert not any("phase" in key for key in cand.scalars.columns)  # text is not a metric


def test_gapwatch_detect_pairs_the_run_with_its_reference_without_a_mapping(pair):
    detect_needs_no_mapping(pair)


def test_without_a_step_each_log_is_the_next_step_and_finish_closes_the_run(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    tracker = GapwatchTracker("counted", url, settings=MonitorSettings(spool_dir=tmp_path))
    tracker.store_init_configuration({"seed": 1})
    assert isinstance(tracker.tracker, NullMonitor)  # nothing opened before the first log
    for loss in (3.0, 2.5, 2.0):
        tracker.log({"loss": loss})
    tracker.log({"loss": 1.5}, step=10)
    tracker.log({"loss": 1.4})
    tracker.finish()
    with open_store(url) as store:
        counted = store.load_run("counted")
        assert list(counted.series("train/loss").index) == [0, 1, 2, 10, 11]
        assert store.get_run("counted")["status"] == "finished" and store.get_run("counted")["config"] == {"seed": 1}
