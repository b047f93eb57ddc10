"""Keras's TensorBoard callback, as real Keras 3.15 wrote it (data/keras/make_logs.py): every
series on the optimizer's steps (monitor/importers/keras_steps.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor import schema
from monitor.importers import load
from monitor.importers.keras_steps import place

KERAS = Path(__file__).parent / "data" / "keras"


def _series(run_data, key):
    return run_data.series(key).dropna()


def test_the_callbacks_defaults_put_each_epoch_at_its_last_step():
    run = load(KERAS / "per_epoch")
    data = run.to_run_data("k")
    # 20 batches an epoch: epoch e ends at step 20 (e + 1); the held-out loss was at steps 0-3.
    assert list(_series(data, schema.TRAIN_LOSS).index) == [20, 40, 60, 80]
    assert list(_series(data, schema.heldout_key("validation")).index) == [20, 40, 60, 80]
    assert list(_series(data, schema.OPTIM_LR).index) == [20, 40, 60, 80]
    # The evaluations by optimizer step repeat the held-out epoch means: one series, not two.
    assert not [k for k in data.scalars.columns if "vs_iterations" in k]
    assert any("20 an epoch" in n for n in run.notes)


def test_batch_values_are_the_mean_since_the_value_before_not_over_the_epoch_so_far():
    # update_freq=5: Keras logged the epoch's running mean every 5 batches; validation every 2 epochs.
    data = load(KERAS / "every5_val2").to_run_data("k")
    loss = _series(data, schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(5, 85, 5))
    epochs = _series(data, "train/epoch_loss")
    assert list(epochs.index) == [20, 40, 60, 80]
    # Each epoch's four means of 5 batches average to the mean Keras logged for the epoch.
    for end, mean in epochs.items():
        assert loss.loc[end - 15:end].mean() == pytest.approx(mean, rel=1e-5)
    # As Keras logged them, the last value of each epoch was the epoch's own mean.
    assert not np.allclose(loss.loc[[20, 40, 60, 80]].to_numpy(), epochs.to_numpy())
    assert list(_series(data, schema.heldout_key("validation")).index) == [40, 80]


def test_a_fit_resumed_from_its_checkpoint_goes_on_from_the_checkpoints_step():
    # Killed 9 batches into its third epoch; the next process loaded the checkpoint saved after
    # the second epoch and counted its batches from 1 again, at optimizer step 41.
    run = load(KERAS / "resumed")
    assert run.attempts == 2
    assert [(e["step"], e["kind"]) for e in run.events] == [(41, "restart")]
    data = run.to_run_data("k")
    loss = _series(data, schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(1, 81))
    for end, mean in _series(data, "train/epoch_loss").items():
        assert loss.loc[end - 19:end].mean() == pytest.approx(mean, rel=1e-5)
    assert list(_series(data, schema.heldout_key("validation")).index) == [20, 40, 60, 80]


def _record(step, tag, value=1.0):
    return (step, tag, value, 0.0)


def test_steps_an_epoch_come_from_where_each_epochs_batches_stop_when_nothing_was_evaluated():
    train = Path("run/train/events.out.tfevents.1")
    batches = [_record(b, "batch_loss", 2.0) for b in range(1, 11)]
    records = {train: batches[:5] + [_record(0, "epoch_loss")] + batches[5:] + [_record(1, "epoch_loss")]}
    placed, note = place(records, "run")
    assert [s for s, t, _, _ in placed[train] if t == "epoch_loss"] == [5, 10]
    assert "5 an epoch" in note
    # Logged every 3 batches, an epoch of 5 batches is not pinned (after 3, 6 could be 4, 5 or 6):
    # left as numbered, and said so.
    sparse = {train: [_record(3, "batch_loss"), _record(0, "epoch_loss"), _record(6, "batch_loss"),
                      _record(1, "epoch_loss")]}
    placed, note = place(sparse, "run")
    assert placed == sparse and "left as numbered" in note


def test_a_value_logged_in_a_later_epoch_is_a_mean_over_that_epoch_alone():
    # Logged every 30 batches of epochs of 20: step 60's mean (the last 20 batches of epoch 2)
    # owes nothing to step 30's (10 batches into epoch 1).
    train = Path("run/train/events.out.tfevents.1")
    evaluations = Path("run/validation/events.out.tfevents.1")
    records = {train: [_record(30, "batch_loss", 3.0), _record(60, "batch_loss", 2.0)],
               evaluations: [_record(20, "evaluation_loss_vs_iterations", 4.0), _record(0, "epoch_loss", 4.0)]}
    placed, _ = place(records, "run")
    assert [(s, v) for s, _, v, _ in placed[train]] == [(30, 3.0), (60, 2.0)]
    assert placed[evaluations] == [(20, "epoch_loss", 4.0, 0.0)]
