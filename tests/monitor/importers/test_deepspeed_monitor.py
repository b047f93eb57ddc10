"""DeepSpeed's monitor numbers its series by samples seen; they are read on optimizer steps
(monitor/importers/sample_steps.py, the `deepspeed` profile). The TensorBoard folder is written
as DeepSpeed's TensorBoardMonitor writes it (a SummaryWriter in output_path/job_name, one
add_scalar per event at global_samples); the W&B run by the real wandb SDK (wandb_writer.deepspeed).
Read whole (`load`) or in parts (a streamed W&B history, a followed run), the rows land alike."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from torch.utils.tensorboard import SummaryWriter

from monitor import schema
from monitor.importers import import_source, load, table_stream
from monitor.importers.follow import FollowConfig, follow
from monitor.importers.imported_run import ImportedRun, scalars_frame
from monitor.importers.sample_steps import SampleSteps, SpacingChanged, on_steps
from monitor.importers.store_writer import write_run
from monitor.store import open_store

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


# --- read in parts: a streamed table, a followed run ---------------------------------------------
def _history_jsonl(path, samples_at):
    """A W&B history saved as JSON Lines of a run DeepSpeed's W&B monitor logged: `_step` is the
    samples seen (wandb.log(..., step=global_samples)), one row a step."""
    lines = [json.dumps({"_step": s, "_runtime": 0.5 * i, "Train/Samples/train_loss": 4 - i * 0.005,
                         "Train/Samples/lr": 1e-4}) for i, s in enumerate(samples_at, start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def chunks_of_three_rows(monkeypatch):
    """Chunks of a few rows: the first holds one value of each series, the spacing comes later."""
    monkeypatch.setattr(table_stream, "CHUNK_ROWS", 3)
    monkeypatch.setattr(table_stream, "BLOCK_BYTES", 64)


def test_a_streamed_wandb_history_is_on_optimizer_steps_as_the_whole_file_is(sqlite_url, tmp_path,
                                                                               chunks_of_three_rows):
    path = _history_jsonl(tmp_path / "history.jsonl", [64 * k for k in range(1, 41)])
    with open_store(sqlite_url) as store:
        write_run(store, "whole", load(path))
        _, summary = import_source(store, "streamed", path)
        whole, streamed = store.load_run("whole"), store.load_run("streamed")
    loss = streamed.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(1, 41)) and loss.loc[20] == pytest.approx(3.9)
    pd.testing.assert_frame_equal(whole.scalars, streamed.scalars)
    assert any("64 samples a step" in n for n in summary.notes)


def test_a_batch_size_that_changes_far_into_a_streamed_file_keeps_every_value_on_its_samples(
        sqlite_url, tmp_path, chunks_of_three_rows):
    # Placed at 64 samples a step for 30 chunks, then 128: the import starts again, keeping samples.
    samples = [64 * k for k in range(1, 31)] + [1920 + 128 * k for k in range(1, 11)]
    path = _history_jsonl(tmp_path / "history.jsonl", samples)
    with open_store(sqlite_url) as store:
        write_run(store, "whole", load(path))
        _, summary = import_source(store, "streamed", path)
        whole, streamed = store.load_run("whole"), store.load_run("streamed")
    assert list(streamed.series(schema.TRAIN_LOSS).dropna().index) == samples
    pd.testing.assert_frame_equal(whole.scalars, streamed.scalars)
    assert any("left so: their samples grow by different numbers" in n for n in summary.notes)


def test_rows_wait_for_the_part_that_shows_the_spacing_and_keep_their_order():
    placing = SampleSteps()
    first = scalars_frame([64, 64, 64], ["Train/Samples/train_loss", "Train/Samples/lr", "train/other"],
                          [4.0, 1e-4, 7.0])
    out = placing.place(first)
    assert list(out["key"]) == ["train/other"]  # the series' first values wait
    second = scalars_frame([128, 128], ["Train/Samples/train_loss", "Train/Samples/lr"], [3.9, 1e-4])
    out = placing.place(second)
    assert list(zip(out["key"], out["step"])) == [("Train/Samples/train_loss", 1), ("Train/Samples/lr", 1),
                                                  ("Train/Samples/train_loss", 2), ("Train/Samples/lr", 2)]
    with pytest.raises(SpacingChanged, match="64 samples a step"):
        placing.place(scalars_frame([256], ["Train/Samples/train_loss"], [3.8]))
    # A source that ends before any series shows a spacing gives its rows back on their samples.
    lone = SampleSteps()
    assert not len(lone.place(scalars_frame([64], ["Train/Samples/train_loss"], [4.0])))
    assert list(lone.rest()["step"]) == [64] and "no Train/Samples/ series logged two values" in lone.note("src")


def test_a_followed_wandb_run_is_on_optimizer_steps_as_its_whole_import_is(sqlite_url, tmp_path):
    run_writer(tmp_path, "deepspeed", 30)
    with open_store(sqlite_url) as store:
        follow(store, "followed", str(offline_run_dir(tmp_path)), "wandb-file", config=FollowConfig(max_polls=3),
               sleep=lambda s: None)
        loss = store.load_run("followed").series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(1, 31))


def test_eigenvalues_logged_every_few_steps_go_on_the_steps_the_samples_series_give():
    steps = list(range(1, 21))
    keys = ["Train/Samples/train_loss"] * 20 + ["Train/Eigenvalues/ModelBlockParam_0"] * 4
    samples = [64 * s for s in steps] + [64 * s for s in (5, 10, 15, 20)]
    run = on_steps(ImportedRun(name_hint="ev", source="ev", scalars=scalars_frame(samples, keys, [1.0] * 24)))
    eigen = run.scalars[run.scalars["key"] == "Train/Eigenvalues/ModelBlockParam_0"]
    assert list(eigen["step"]) == [5, 10, 15, 20]
    # Alone, they give no spacing (every few steps is not one step): they keep their samples.
    alone = on_steps(ImportedRun(name_hint="ev", source="ev", scalars=scalars_frame(
        samples[20:], keys[20:], [1.0] * 4)))
    assert list(alone.scalars["step"]) == samples[20:] and "logged two values" in alone.notes[-1]
