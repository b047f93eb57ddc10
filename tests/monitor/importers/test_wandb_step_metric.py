"""The step key a W&B run declares with define_metric, from its declarations and logged names."""

from __future__ import annotations

import numpy as np
import yaml

from monitor.importers.wandb.run_file import WandbRunReader, find_run_file
from monitor.importers.wandb.step_metric import LoggedItems, StepDeclaration, declared_step, from_config


def glob(pattern, step):
    return StepDeclaration(pattern, True, step)


def name(pattern, step):
    return StepDeclaration(pattern, False, step)


def logged(*rows: dict) -> LoggedItems:
    """History rows as the items a run file holds: each row's values, the row numbered from 0."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    items = [(i, names.index(k), float(v)) for i, r in enumerate(rows) for k, v in r.items()]
    row, code, value = (np.array(c) for c in zip(*items))
    return LoggedItems(names, row, code, value)


def steps_of(key: str, n: int = 3, **metrics) -> LoggedItems:
    """n rows, each logging `key` = its number from 1 and every metric."""
    return logged(*({key: i + 1, **metrics} for i in range(n)))


def test_the_catch_all_glob_names_the_step_as_hf_and_lightning_declare_it():
    assert declared_step([glob("*", "trainer/global_step")],
                         steps_of("trainer/global_step", train_loss=2.0, val_loss=3.0)) == ("trainer/global_step", [])


def test_the_step_most_logged_names_are_declared_against_wins_and_the_rest_are_said():
    items = logged({"optim_step": 1, "train/loss": 3, "train/lr": 1}, {"optim_step": 2, "train/loss": 2, "train/lr": 1},
                   {"epoch": 1, "val/loss": 2.5})
    found, notes = declared_step([glob("train/*", "optim_step"), glob("val/*", "epoch")], items)
    assert found == "optim_step"
    assert notes == ["the run declares 'epoch', not 'optim_step', as the W&B x axis of 1 metric(s) (val/loss): on "
                     "gapwatch's one step axis each value sits at the step of the row that logged it"]


def test_a_names_own_declaration_comes_before_a_glob_and_a_later_glob_before_an_earlier():
    items = logged(*({"s": i, "t": i, "a/x": 1, "a/y": 1, "a/z": 1} for i in range(3)))
    assert declared_step([glob("a/*", "s"), name("a/x", "t"), name("a/y", "t")], items)[0] == "t"
    assert declared_step([glob("*", "t"), glob("a/*", "s")], items)[0] == "s"


def test_a_step_key_the_run_never_logged_is_no_axis():
    assert declared_step([glob("*", "global_step")], steps_of("step", loss=1.0)) == (None, [])
    assert declared_step([], steps_of("step", loss=1.0)) == (None, [])


def test_a_declared_key_that_holds_no_whole_steps_is_said_and_not_taken():
    fractional = logged(*({"train/epoch": e, "train/loss": 1.0} for e in (0.25, 0.5, 0.75)))
    found, notes = declared_step([glob("*", "train/epoch")], fractional)
    assert found is None
    assert notes == ["the run declares 'train/epoch' as the W&B x axis of train/loss, but it is 0.25, not a whole "
                     "number, so it is no step axis"]
    assert declared_step([glob("*", "optimizer_step")], steps_of("optimizer_step", loss=1.0))[0] == "optimizer_step"


def test_a_key_logged_once_an_epoch_beside_a_loss_logged_every_batch_counts_no_steps():
    # W&B would draw an epoch's batches at one x; one step would hold each epoch's batches.
    batches = [{"train/loss": 3.0 - i / 10} for i in range(6)]
    items = logged(*batches[:3], {"epoch": 1}, *batches[3:], {"epoch": 2})
    found, notes = declared_step([glob("*", "epoch")], items)
    assert found is None
    assert notes == ["the run declares 'epoch' as the W&B x axis of train/loss, but 6 of the 6 rows that log them do "
                     "not log it, so it is no step axis"]


def test_the_declarations_a_run_folders_config_keeps_name_the_step(shared_data):
    # The HF Trainer run in wild/: its config.yaml keeps `*` on train/global_step expanded per metric.
    (config,) = shared_data.glob("wild/wandb/08_alpaca_hftrainer_2023/wandb/run-*/files/config.yaml")
    found = from_config(yaml.safe_load(config.read_text())["_wandb"])
    assert StepDeclaration("train/loss", False, "train/global_step") in found
    assert declared_step(found, steps_of("train/global_step", **{"train/loss": 2.0}))[0] == "train/global_step"
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
