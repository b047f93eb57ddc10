"""W&B run folders that keep their history as JSON Lines (wandb before 0.10, and tools that write
W&B-shaped folders): read with no flags from the run folder, its wandb/ folder or the project
folder, with the config's values and the summary (monitor/importers/wandb/history_folder.py)."""

from __future__ import annotations

import json

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load

CONFIG_YAML = """wandb_version: 1

_wandb:
  desc: null
  value:
    cli_version: 0.9.7
    python_version: 3.7.6
lr:
  desc: null
  value: 0.0006
batch_size:
  desc: null
  value: 64
"""


def _run_folder(folder, steps=300, every=2, config: str = CONFIG_YAML):
    """A run folder as wandb 0.9 left it: each wandb.log a history line (`_step` counting the
    calls), here the trainer's step logged as `trainer/global_step`, every other step."""
    folder.mkdir(parents=True)
    with open(folder / "wandb-history.jsonl", "w") as fh:
        for call, step in enumerate(range(0, steps, every)):
            row = {"trainer/global_step": step, "train/loss": 4 - step / 1000,
                   "_step": call, "_runtime": 10.0 + call, "_timestamp": 1_590_000_000 + call}
            if step % 100 == 0:
                row["val/loss"] = 4.1 - step / 1000
            fh.write(json.dumps(row) + "\n")
    (folder / "config.yaml").write_text(config)
    (folder / "wandb-summary.json").write_text(json.dumps({"train/loss": 3.7, "_runtime": 160}))
    return folder


def test_an_old_run_folder_is_read_on_the_trainers_step_from_any_of_its_folders(tmp_path):
    folder = _run_folder(tmp_path / "wandb" / "run-20200601_120000-2x7k9q1b")
    for source in (folder, tmp_path / "wandb", tmp_path):
        assert detect_format(source) == "wandb-history-folder"
        run = load(source)
        assert run.name_hint == "2x7k9q1b" and run.source == str(folder)
        loss = run.to_run_data("old").series(schema.TRAIN_LOSS)
        assert list(loss.index) == list(range(0, 300, 2))
        assert loss.iloc[-1] == pytest.approx(4 - 298 / 1000)
        assert run.to_run_data("old").series("eval/heldout/val/loss").to_dict() == {
            0: pytest.approx(4.1), 100: pytest.approx(4.0), 200: pytest.approx(3.9)}
        assert run.config == {"lr": 0.0006, "batch_size": 64}
        assert run.summary == {"train/loss": 3.7}


def test_a_folder_with_its_files_in_files_is_read_the_same(tmp_path):
    folder = tmp_path / "offline-run-20240101_000000-abc"
    _run_folder(folder / "files")
    run = load(folder)
    assert run.name_hint == "abc" and run.config["lr"] == 0.0006
    assert len(run.to_run_data("old").series(schema.TRAIN_LOSS)) == 150


def test_a_wandb_folder_of_several_runs_is_refused_with_their_folders(tmp_path):
    _run_folder(tmp_path / "wandb" / "run-20200601_120000-aaa")
    _run_folder(tmp_path / "wandb" / "dryrun-20200602_120000-bbb")
    with pytest.raises(GapwatchError, match="holds 2 W&B runs .*aaa.*import one run"):
        load(tmp_path)
    assert load(tmp_path / "wandb" / "dryrun-20200602_120000-bbb").name_hint == "bbb"


def test_a_config_that_cannot_be_read_costs_only_the_config(tmp_path):
    folder = _run_folder(tmp_path / "run-20200601_120000-c", config="lr: [unclosed\n")
    run = load(folder)
    assert run.config == {} and any("config.yaml: not read" in n for n in run.notes)
    assert len(run.to_run_data("old").series(schema.TRAIN_LOSS)) == 150


def test_a_folder_without_a_history_is_not_taken_for_one(tmp_path):
    # wandb 0.10 and later keep the history in the .wandb file; its files/ folder holds the
    # config and the summary only: such a folder without its .wandb file is no history.
    files = tmp_path / "run-20240101_000000-x" / "files"
    files.mkdir(parents=True)
    (files / "config.yaml").write_text(CONFIG_YAML)
    (files / "wandb-summary.json").write_text("{}")
    assert detect_format(tmp_path) != "wandb-history-folder"
