"""What a series means, from its name and its cadence: the evidence, the guesses said to be guesses,
profile detection that the data can overrule, and the user's file overriding any mapping."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from monitor import schema
from monitor.importers import load
from monitor.importers.meaning import Cadence, cadences, infer, step_time_scale
from monitor.importers.profiles import detect_profile


def _cadence(**every: tuple[int, int]) -> dict[str, Cadence]:
    """name=(every, count) -> cadences of series logged every N steps from step 0."""
    rows = [(s, name) for name, (n, count) in every.items() for s in range(0, n * count, n)]
    frame = pd.DataFrame(rows, columns=["step", "key"])
    return cadences(frame)


def test_loss_logged_every_step_is_training_and_says_why():
    cad = _cadence(loss=(1, 100), grad=(1, 100))
    assert infer("loss", cad) == (schema.TRAIN_LOSS, "name and cadence (every step)")


def test_loss_logged_every_n_steps_beside_a_denser_series_is_an_evaluation():
    cad = _cadence(grad=(1, 100), train_eval_loss=(25, 4), **{"eval/wikitext_loss": (25, 4)})
    key, why = infer("train_eval_loss", cad)
    assert key == schema.heldout_key("train") and "every 25 steps" in why
    key, why = infer("eval/wikitext_loss", cad)
    assert key == schema.heldout_key("wikitext")
    assert why == "name (eval) and cadence (every 25 steps beside a denser series)"


def test_a_training_loss_logged_once_beside_a_per_step_one_is_a_summary_not_an_evaluation():
    # The Hugging Face Trainer logs `train_loss`, its mean over the run, once at the end: read as
    # an evaluation, it became a held-out set called "train".
    cad = _cadence(loss=(1, 100), train_loss=(100, 1))
    assert infer("train_loss", cad) is None
    assert infer("loss", cad) == (schema.TRAIN_LOSS, "name and cadence (every step)")


def test_a_series_at_two_neighbouring_steps_does_not_set_the_runs_cadence():
    # A metric logged at steps 0 and 1 only (an initial norm, say) is no denser series beside
    # which the loss logged every 10 steps would be an evaluation.
    cad = _cadence(loss=(10, 100), init_norm=(1, 2))
    assert infer("loss", cad) == (schema.TRAIN_LOSS, "name and cadence (every 10 steps)")


def test_a_name_alone_is_called_a_guess():
    cad = _cadence(val_loss=(10, 20), learning_rate=(10, 20))
    assert infer("val_loss", cad) == (schema.heldout_key("val"),
                                      "guess from the name (val) alone")
    assert infer("learning_rate", cad) == (schema.OPTIM_LR, "guess from the name alone")
    assert infer("tokens", cad)[0] == schema.TRAIN_TOKENS
    assert infer("accuracy", cad) is None  # no evidence at all: kept under its own name


def test_lightnings_step_and_epoch_twins_of_a_loss():
    # self.log(name, on_step=True, on_epoch=True) logs name_step and name_epoch: a training loss
    # per step, a held-out loss over the whole set (its epoch mean) are the loss.
    cad = _cadence(train_loss_step=(1, 100), train_loss_epoch=(50, 2), val_loss_step=(50, 2),
                   val_loss_epoch=(50, 2))
    assert infer("train_loss_step", cad)[0] == schema.TRAIN_LOSS
    assert infer("val_loss_epoch", cad)[0] == schema.heldout_key("val")
    assert infer("train_loss_epoch", cad) is None and infer("val_loss_step", cad) is None
    assert infer("lr-AdamW", cad) == (schema.OPTIM_LR, "name: Lightning's lr-<optimizer>")


def test_keras_losses_per_epoch_and_per_batch():
    # Keras' TensorBoard callback: epoch_<metric> in train/ and validation/ at each epoch, and
    # batch_<metric> at each batch with update_freq="batch".
    per_epoch = _cadence(**{"train/epoch_loss": (1, 10), "train/epoch_learning_rate": (1, 10),
                            "validation/epoch_loss": (1, 10)})
    assert infer("train/epoch_loss", per_epoch)[0] == schema.TRAIN_LOSS  # the only training loss
    assert infer("validation/epoch_loss", per_epoch)[0] == schema.heldout_key("validation")
    assert infer("train/epoch_learning_rate", per_epoch)[0] == schema.OPTIM_LR
    per_batch = {**per_epoch, **_cadence(**{"train/batch_loss": (1, 1000)})}
    assert infer("train/batch_loss", per_batch)[0] == schema.TRAIN_LOSS
    assert infer("train/epoch_loss", per_batch) is None  # its mean over each epoch, under its own name


@pytest.mark.parametrize("name", ["tokens_per_second", "train/tokens_per_sec", "throughput/tok/s", "tps",
                                  "Tokens/s"])
def test_a_rate_of_tokens_per_second_is_throughput(name):
    assert infer(name, _cadence(**{name: (1, 50)})) == (schema.PERF_TOKENS_PER_S, "name: tokens per second")


@pytest.mark.parametrize("name", ["device/tokens_per_second", "tokens_per_second_per_gpu", "tokens_per_sec_per_gpu",
                                  "perf/per_device_tokens_per_sec", "tokens/s/rank"])
def test_one_devices_share_of_the_rate_is_the_device_rate(name):
    assert infer(name, _cadence(**{name: (1, 50)})) == (schema.PERF_DEVICE_TOKENS_PER_S,
                                                         "name: tokens per second of one device")


@pytest.mark.parametrize("name", ["tokens", "tokens_per_step", "steps_per_second", "gpu_count"])
def test_another_count_is_no_rate(name):
    found = infer(name, _cadence(**{name: (1, 50)}))
    assert found is None or found[0] not in (schema.PERF_TOKENS_PER_S, schema.PERF_DEVICE_TOKENS_PER_S)


@pytest.mark.parametrize("name,scale", [("step_time", 1.0), ("iteration_time", 1.0), ("runtime/iteration_time", 1.0),
                                        ("elapsed_time_per_iteration_ms", 1e-3), ("time_per_step_s", 1.0),
                                        ("train/step_time_ms", 1e-3), ("perf/iter_time_sec", 1.0)])
def test_the_time_a_step_took_is_the_step_time_in_seconds(name, scale):
    assert infer(name, _cadence(**{name: (1, 50)})) == (schema.PERF_STEP_TIME_S, "name: the time a step took")
    assert step_time_scale(name) == scale


@pytest.mark.parametrize("name", ["train_time_ms", "elapsed_time", "time", "data_loading_time", "eval/step_time",
                                  "timers/data_time"])
def test_a_clock_or_another_phases_time_is_no_step_time(name):
    # A cumulative clock (modded-nanogpt's train_time) or the data loader's share of a step.
    assert step_time_scale(name) is None


@pytest.mark.parametrize("name", ["optim/learning_rate", "optimizer/lr", "trainer/learning-rate", "train/lr"])
def test_a_learning_rate_under_a_namespace(name):
    assert infer(name, _cadence(**{name: (1, 50)}))[0] == schema.OPTIM_LR


def test_the_time_a_step_took_is_imported_in_seconds(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 3.0, "elapsed_time_per_iteration_ms": 250.0}) + "\n"
                            for s in range(1, 21)))
    assert load(path).to_run_data("r").series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(0.25)


def _custom_loop(path, steps=200, every=50):
    with path.open("w") as fh:
        for s in range(steps):
            row = {"step": s, "train/loss": 4 - s / steps, "lr": 1e-3}
            if s % every == 0:
                row["val/loss"] = 4.2 - s / steps
            fh.write(json.dumps(row) + "\n")
    return path


NAME_ONLY_PROFILE = """
profiles:
  nanogpt:  # nanoGPT's names as gapwatch once mapped them, by the names alone
    rules:
      - {match: 'train/loss', key: 'eval/heldout/train/loss'}
      - {match: 'val/loss', key: 'eval/heldout/val/loss'}
      - {match: 'lr', key: 'optim/lr'}
"""


def test_the_data_overrules_a_profile_that_calls_a_per_step_loss_held_out(tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(NAME_ONLY_PROFILE)
    names = ["train/loss", "val/loss", "lr"]
    # By the names alone the profile explains every name and wins.
    assert detect_profile(names, profiles).name == "nanogpt"
    run = load(_custom_loop(tmp_path / "loop.jsonl"), profiles_file=profiles)
    # The data says train/loss is logged every step beside an every-50-steps val/loss.
    assert run.profile != "nanogpt"
    assert run.key_map["train/loss"] == schema.TRAIN_LOSS
    assert run.key_map["val/loss"] == schema.heldout_key("val")
    why = {r["source"]: r["reason"] for r in run.mapping}
    assert why["val/loss"].startswith("name (val) and cadence (every 50 steps")


def test_same_cadence_everywhere_keeps_the_profile(tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(NAME_ONLY_PROFILE)
    path = tmp_path / "evals.jsonl"
    path.write_text("".join(json.dumps({"step": s, "train/loss": 3.0, "val/loss": 3.1, "lr": 1.0})
                            + "\n" for s in range(0, 500, 100)))
    assert load(path, profiles_file=profiles).profile == "nanogpt"


def test_the_users_file_overrides_one_mapping_of_a_builtin_profile(tmp_path, shared_data):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("profiles:\n  hf:\n    extends: hf\n    rules:\n"
                        "      - {match: 'train/epoch', key: 'train/epochs_done'}\n"
                        "      - {match: 'train/learning_rate', drop: true}\n")
    (folder,) = (shared_data / "wild/wandb/08_alpaca_hftrainer_2023/wandb").glob("run-*")
    run = load(folder, profiles_file=profiles)
    assert run.profile == "hf"
    assert run.key_map["train/epoch"] == "train/epochs_done"
    assert "train/learning_rate" not in run.key_map
    assert run.key_map["train/loss"] == schema.TRAIN_LOSS  # the built-in rules still apply


@pytest.mark.parametrize("step_key", ["train/global_step", "_step"])
def test_step_key_names_the_axis(shared_data, step_key):
    (folder,) = (shared_data / "wild/wandb/10_llamafactory_dpo_2024/wandb").glob("run-*")
    if step_key == "_step":
        # W&B's own row counter, named on purpose: not a logged key, so it is refused.
        with pytest.raises(Exception, match="step key '_step' is not logged"):
            load(folder, step_key=step_key)
        return
    data = load(folder, step_key=step_key).to_run_data("d")
    assert data.scalars.index.max() == 156


def test_a_streamed_import_weighs_the_cadence_too(tmp_path, sqlite_url, capsys):
    from app.cli import main

    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(NAME_ONLY_PROFILE)
    path = _custom_loop(tmp_path / "loop.jsonl")
    assert main(["import", str(path), "--run", "loop", "--store", sqlite_url,
                 "--profiles-file", str(profiles)]) == 0
    table = capsys.readouterr().err
    assert "val/loss    eval/heldout/val/loss  every 50 steps  4      name (val) and cadence" in table
    assert "train/loss  train/loss" in table


def test_a_loss_named_before_its_split():
    # torch.utils.tensorboard's own example logs "Loss/train" and "Loss/test".
    cad = _cadence(**{"Loss/train": (1, 100), "Loss/test": (25, 4), "loss_val": (25, 4), "loss_scale": (1, 100)})
    assert infer("Loss/train", cad) == (schema.TRAIN_LOSS, "name and cadence (every step)")
    assert infer("Loss/test", cad)[0] == schema.heldout_key("test")
    assert infer("loss_val", cad)[0] == schema.heldout_key("val")
    assert infer("loss_scale", cad) is None  # the mixed-precision loss scale is no loss
