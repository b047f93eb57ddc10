"""The step key a W&B run declares with define_metric, from its declarations and logged names."""

from __future__ import annotations

import yaml

from monitor.importers.wandb.run_file import WandbRunReader, find_run_file
from monitor.importers.wandb.step_metric import StepDeclaration, declared_step, from_config


def glob(pattern, step):
    return StepDeclaration(pattern, True, step)


def name(pattern, step):
    return StepDeclaration(pattern, False, step)


def test_the_catch_all_glob_names_the_step_as_hf_and_lightning_declare_it():
    assert declared_step([glob("*", "trainer/global_step")], ["trainer/global_step", "train_loss", "val_loss"]) == \
        ("trainer/global_step", [])


def test_the_step_most_logged_names_are_declared_against_wins_and_the_rest_are_said():
    found, notes = declared_step([glob("train/*", "optim_step"), glob("val/*", "epoch")],
                                 ["optim_step", "epoch", "train/loss", "train/lr", "val/loss"])
    assert found == "optim_step"
    assert notes == ["the run declares 'epoch', not 'optim_step', as the W&B x axis of 1 metric(s) (val/loss): on "
                     "gapwatch's one step axis each value sits at the step of the row that logged it"]


def test_a_names_own_declaration_comes_before_a_glob_and_a_later_glob_before_an_earlier():
    names = ["s", "t", "a/x", "a/y", "a/z"]
    assert declared_step([glob("a/*", "s"), name("a/x", "t"), name("a/y", "t")], names)[0] == "t"
    assert declared_step([glob("*", "t"), glob("a/*", "s")], names)[0] == "s"


def test_a_step_key_the_run_never_logged_is_no_axis():
    assert declared_step([glob("*", "global_step")], ["train/loss"]) == (None, [])
    assert declared_step([], ["train/loss", "step"]) == (None, [])


def test_a_declared_key_that_holds_no_whole_steps_is_said_and_not_taken():
    values = {"train/epoch": [0.25, 0.5, 0.75], "optimizer_step": [1.0, 2.0, 3.0]}
    found, notes = declared_step([glob("*", "train/epoch")], ["train/epoch", "train/loss"], values.get)
    assert found is None
    assert notes == ["the run declares 'train/epoch' as the W&B x axis of its metrics, but 'train/epoch' is 0.25, "
                     "not a whole number, so it is no step axis"]
    assert declared_step([glob("*", "optimizer_step")], ["optimizer_step", "train/loss"], values.get) == \
        ("optimizer_step", [])


def test_the_declarations_a_run_folders_config_keeps_name_the_step(shared_data):
    # The HF Trainer run in wild/: its config.yaml keeps `*` on train/global_step expanded per metric.
    (config,) = shared_data.glob("wild/wandb/08_alpaca_hftrainer_2023/wandb/run-*/files/config.yaml")
    found = from_config(yaml.safe_load(config.read_text())["_wandb"])
    assert StepDeclaration("train/loss", False, "train/global_step") in found
    assert declared_step(found, ["train/global_step", "train/loss", "train/learning_rate"])[0] == "train/global_step"
    # Its run file holds the same declaration as a record of its own (wandb 0.15).
    reader = WandbRunReader(find_run_file(config.parents[1]))
    reader.read()
    assert reader.step_declarations == [glob("*", "train/global_step")]


def test_config_declarations_by_name_or_glob_and_odd_shapes():
    entries = {"m": [{"1": "it"}, {"2": "val/*", "4": "epoch"}, {"1": "loss", "5": 1}, {"1": "x", "5": 9},
                     "junk", {"1": "y", "5": True}]}
    assert from_config(entries) == [glob("val/*", "epoch"), name("loss", "it")]
    assert from_config({"value": entries}) == from_config(entries)  # as the server wraps a config value
    assert from_config(None) == [] and from_config({"m": "?"}) == [] and from_config([1]) == []
