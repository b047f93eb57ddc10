"""DeepSpeed's monitor numbers its series by samples seen; they are read on optimizer steps
(monitor/importers/sample_steps.py, the `deepspeed` profile). The TensorBoard folder is written
as DeepSpeed's TensorBoardMonitor writes it (a SummaryWriter in output_path/job_name, one
add_scalar per event at global_samples); the W&B run by the real wandb SDK (wandb_writer.deepspeed)."""

from __future__ import annotations

import pytest
from torch.utils.tensorboard import SummaryWriter

from monitor import schema
from monitor.importers import load
from monitor.importers.imported_run import ImportedRun, scalars_frame
from monitor.importers.sample_steps import on_steps

from .conftest import offline_run_dir, run_writer


def _tensorboard(folder, steps, samples_per_step=64):
    writer = SummaryWriter(str(folder / "ds_job"))
    for step in steps:
        samples = step * samples_per_step
        writer.add_scalar("Train/Samples/train_loss", 4 - step * 0.005, samples)
        writer.add_scalar("Train/Samples/lr", 1e-4, samples)
        writer.add_scalar("Train/Samples/loss_scale", 65536.0, samples)
    writer.close()


def test_tensorboard_series_by_samples_are_on_optimizer_steps(tmp_path):
    _tensorboard(tmp_path, range(1, 201))
    run = load(tmp_path / "ds_job")
    assert run.profile == "deepspeed"
    data = run.to_run_data("ds")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(1, 201)) and loss.loc[100] == pytest.approx(3.5)
    assert data.series(schema.OPTIM_LR).dropna().index[-1] == 200
    assert data.series("train/loss_scale").dropna().iloc[0] == 65536.0
    assert any("64 samples a step" in n for n in run.notes)


def test_a_run_resumed_from_its_checkpoint_restarts_at_the_checkpoints_step(tmp_path):
    _tensorboard(tmp_path, range(1, 151))
    _tensorboard(tmp_path, range(101, 201))  # killed after step 150, resumed from step 100's checkpoint
    run = load(tmp_path / "ds_job")
    assert [(e["step"], e["kind"]) for e in run.events] == [(101, "restart")]
    assert list(run.to_run_data("ds").series(schema.TRAIN_LOSS).dropna().index) == list(range(1, 201))


def test_samples_that_grow_unevenly_are_kept_and_said():
    # A batch size that ramps up: 32 samples a step, then 64. No one spacing is a step.
    steps = [32, 64, 96, 160, 224]
    run = ImportedRun(name_hint="ramp", source="ramp",
                      scalars=scalars_frame(steps, ["Train/Samples/train_loss"] * 5, [4.0] * 5))
    assert list(on_steps(run).scalars["step"]) == steps
    assert "left so: their samples grow by different numbers" in run.notes[-1]
    # Series of other names are never touched.
    other = ImportedRun(name_hint="x", source="x", scalars=scalars_frame([64, 128], ["train/loss"] * 2, [4.0, 3.9]))
    assert list(on_steps(other).scalars["step"]) == [64, 128] and not other.notes


def test_the_wandb_monitors_run_is_on_optimizer_steps(tmp_path):
    run_writer(tmp_path, "deepspeed", 50)
    data = load(offline_run_dir(tmp_path)).to_run_data("ds")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(1, 51)) and loss.loc[25] == pytest.approx(3.5)
