"""The report's settings table: where the two recipes differ, read from each run's config."""

from __future__ import annotations

import json
from types import SimpleNamespace

from app.cli import main
from app.report.settings_table import MAX_ROWS, settings_table


def pair(run_config: dict, reference_config: dict):
    """The two runs as the table reads them: names and configs."""
    def run(name, config):
        return SimpleNamespace(name=name, info=SimpleNamespace(config=config))
    return SimpleNamespace(run=run("run", run_config), reference=run("ref", reference_config))


def test_differing_settings_come_first_and_shared_ones_are_counted():
    table = settings_table(pair(
        {"optimizer": {"lr": 3e-4, "betas": [0.9, 0.95]}, "batch_size": 512, "seed": 1, "warmup": 2000,
         "summary": {"train/loss": 2.9}, "_wandb": {"cli_version": "0.17"}},
        {"optimizer": {"lr": 6e-4, "betas": [0.9, 0.95]}, "batch_size": 512.0, "seed": 2, "compile": True,
         "summary": {"train/loss": 2.8}}))
    assert [(r["setting"], r["run"], r["reference"], r["differs"]) for r in table.rows] == [
        ("optimizer.lr", "0.0003", "0.0006", True), ("seed", "1", "2", True),
        ("warmup", "2000", "-", False), ("compile", "-", "True", False)]  # the recipe's before the rest
    # 512 and 512.0 are one setting; the final values and W&B's bookkeeping are not settings.
    assert table.note.startswith("2 of 6 settings are the same in both runs")


def test_a_run_that_records_no_settings_is_said_so():
    assert settings_table(pair({"lr": 1}, {})).empty_reason == "only run recorded its settings: nothing to compare them with"
    assert settings_table(pair({}, {})).empty_reason.startswith("neither run recorded its settings")
    same = settings_table(pair({"lr": 1}, {"lr": 1.0}))
    assert same.rows == [] and same.empty_reason == "the two runs record the same 1 settings"


def test_many_differences_are_listed_up_to_a_limit():
    table = settings_table(pair({f"layer{i}": i for i in range(100)}, {f"layer{i}": -i for i in range(1, 101)}))
    assert len(table.rows) == MAX_ROWS and f"{99 + 2 - MAX_ROWS} more that differ are not listed" in table.note


def test_two_wild_wandb_runs_show_their_recipes_differences(shared_data, tmp_path, capsys):
    """cs336's custom trainer against nanoGPT, both from their W&B run folders: the learning rates
    and batch sizes they logged are side by side in the report."""
    store = f"sqlite:///{tmp_path}/wild.db"
    wandb = shared_data / "wild" / "wandb"
    for folder, name in (("11_cs336_custom_2025/wandb/run-20250715_214837-c9eupgab", "cs336"),
                         ("14_nanogpt_muon_2026/wandb/run-20260329_130713-zi7a94pe", "nanogpt")):
        assert main(["import", str(wandb / folder), "--run", name, "--store", store]) == 0
    out = tmp_path / "report.json"
    assert main(["report", "--run", "cs336", "--reference", "nanogpt", "--store", store, "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    table = report["tables"]["settings"]
    rows = {r["setting"]: r for r in table["rows"]}
    # The verdict on two runs of different recipes says so, the recipe's settings first.
    assert ("The runs record different settings: learning_rate 0.003 vs 0.0006, batch_size 32 vs 12, weight_decay "
            "0.01 vs 0.1 and 5 more (see Settings that differ).") in report["verdict"]["sentence"]
    assert (rows["learning_rate"]["run"], rows["learning_rate"]["reference"]) == ("0.003", "0.0006")
    assert (rows["batch_size"]["run"], rows["batch_size"]["reference"]) == ("32", "12")
    assert "summary" not in rows and not any(s.startswith("summary.") for s in rows)
    # cs336's held-out loss, logged every other step, is judged at thousands of checkpoints, counted
    # as numbers are in the rest of the report.
    assert "below the reference at 1,998 checkpoints" in json.dumps(report["detections"])
