"""Every file in the shared data's `wild/` folder (real runs that other people's trainers wrote, see
its README): the trainer's step as the axis, the training loss as `train/loss`, evaluation losses
as held-out sets, and last values equal to the file's own last record of each key."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from app.cli import main
from monitor import schema
from monitor.detectors.memorization import Memorization
from monitor.detectors.memorization_trend import MemorizationTrend
from monitor.detectors.throughput import ThroughputDetector
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.wandb.csv_export import panel_runs, runs_table_error
from monitor.store import open_store


def _run_folder(shared_data, case: str):
    (folder,) = (shared_data / "wild" / "wandb" / case / "wandb").glob("run-*")
    return folder


DECLARED = "the trainer's step (declared by define_metric)"
# case, step key and why it is the axis, first and last trainer step, held-out sets; the HF Trainer
# declares its step to W&B, the custom loops log a key of a well-known name.
WANDB_CASES = [
    ("08_alpaca_hftrainer_2023", "train/global_step", DECLARED, 1, 243, []),
    ("10_llamafactory_dpo_2024", "train/global_step", DECLARED, 10, 156, []),
    ("11_cs336_custom_2025", "step", "the trainer's step", 0, 4881, ["val"]),
    ("14_nanogpt_muon_2026", "iter", "the trainer's step", 0, 4100, ["val"]),
]


@pytest.mark.parametrize("case, step_key, why, first, last, heldout", WANDB_CASES)
def test_wandb_run_folder(shared_data, case, step_key, why, first, last, heldout):
    folder = _run_folder(shared_data, case)
    run = load(folder)
    data = run.to_run_data(case)
    # The project folder the trainer wrote `wandb/` into is the same run.
    assert len(load(folder.parent.parent).scalars) == len(run.scalars)
    assert (data.scalars.index.min(), data.scalars.index.max()) == (first, last)
    assert run.attempts == 1
    axis = run.mapping[0]
    assert (axis["source"], axis["key"], axis["reason"]) == (step_key, "(step axis)", why)
    assert axis["count"] >= len(data.scalars)
    assert schema.TRAIN_LOSS in data.scalars.columns
    sets = sorted(k.split("/")[2] for k in data.scalars.columns
                  if k.startswith("eval/heldout/"))
    assert sets == heldout
    # The last value of every kept key is the run's own last record of it: wandb's summary file,
    # written by the SDK beside the .wandb file.
    summary = json.loads((folder / "files" / "wandb-summary.json").read_text())
    scales = {"perf/mfu": 0.01}
    checked = 0
    for source, key in run.key_map.items():
        if source not in summary or not isinstance(summary[source], (int, float)):
            continue
        series = data.series(key).dropna()
        assert series.iloc[-1] == pytest.approx(summary[source] * scales.get(key, 1.0)), source
        checked += 1
    assert checked >= 3


def test_nanogpt_mfu_before_its_first_estimate_is_not_a_measurement(shared_data):
    # nanoGPT logs MFU as -100% until its running estimate exists (iteration 0 here).
    run = load(_run_folder(shared_data, "14_nanogpt_muon_2026"))
    mfu = run.to_run_data("nanogpt").series(schema.PERF_MFU).dropna()
    assert mfu.min() > 0 and mfu.index[0] > 0
    assert any("1 of perf/mfu" in note for note in run.notes)


def test_hf_trainer_final_aggregates_are_not_per_step_metrics(shared_data):
    run = load(_run_folder(shared_data, "08_alpaca_hftrainer_2023"))
    assert run.profile == "hf"
    assert not any(k.startswith("train/train_") for k in run.keys)
    assert run.key_map["train/learning_rate"] == schema.OPTIM_LR
    dropped = {r["source"] for r in run.mapping if r["key"] is None}
    assert {"train/train_loss", "train/train_runtime", "train/total_flos"} <= dropped


def test_llamafactory_tokens_and_nested_names(shared_data):
    run = load(_run_folder(shared_data, "10_llamafactory_dpo_2024"))
    data = run.to_run_data("dpo")
    tokens = data.series(schema.TRAIN_TOKENS).dropna()
    assert tokens.index[-1] == 156 and tokens.iloc[-1] == 9935296
    assert {"train/rewards/chosen", "train/logps/chosen"} <= set(data.scalars.columns)
    # W&B's row counter ran 0..15: the trainer's step is 10x it.
    assert list(data.series(schema.TRAIN_LOSS).dropna().index[:3]) == [10, 20, 30]


def test_custom_loop_evaluation_row_joins_its_step(shared_data):
    run = load(_run_folder(shared_data, "11_cs336_custom_2025"))
    data = run.to_run_data("cs336")
    # The last W&B row holds only val_loss: it belongs to the step logged before it.
    val = data.series(schema.heldout_key("val")).dropna()
    assert val.index[-1] == 4881 and val.iloc[-1] == pytest.approx(1.9110777926445008)
    assert data.series(schema.TRAIN_LOSS).dropna().iloc[-1] == pytest.approx(1.9583988189697266)
    # Its tokens_per_second is the run's throughput, judged by the throughput detector.
    assert run.key_map["tokens_per_second"] == schema.PERF_TOKENS_PER_S
    assert ThroughputDetector().not_judged(data) == []


@pytest.mark.parametrize("case", ["11_cs336_custom_2025", "14_nanogpt_muon_2026"])
def test_held_out_loss_as_often_as_train_loss_is_judged_against_a_reference_only(shared_data, case):
    # cs336 evaluates at every logged step, nanoGPT estimates train loss at evaluations only: no
    # checkpoint has the train window the run's own trend needs, and the reason says so, not "more
    # checkpoints".
    data = load(_run_folder(shared_data, case)).to_run_data(case)
    (why,) = MemorizationTrend().not_judged(data)
    assert why.reason.startswith("train loss is logged too seldom between held-out evaluations")
    assert why.needs.startswith("train loss logged several times between held-out evaluations (against a reference")
    # Against a reference the train difference is flat, so its window may reach back further: judged.
    reference = load(_run_folder(shared_data, case)).to_run_data("reference")
    assert Memorization().not_judged(data, reference) == [] and Memorization().table(data, reference)["judged"].any()


def test_lightning_tensorboard(shared_data):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = shared_data / "wild/tensorboard/01_lightning_torchtb_lstm_textgen_2024/lightning_logs/version_0"
    run = load(folder)
    data = run.to_run_data("tb")
    assert run.attempts == 1  # Lightning logs `epoch` twice at a step: not a restart
    # Named by Lightning's own conventions, not by another trainer's that shares two names.
    assert run.profile == "lightning"
    # hparams.yaml beside the event file: the run's settings.
    assert run.config == {"hidden_units": 512, "lr": 0.001, "num_chars": 29, "num_layers": 2, "seq_length": 100}
    assert run.key_map == {"train_loss": schema.TRAIN_LOSS, "val_loss": schema.heldout_key("val"),
                           "epoch": "train/epoch", "hp_metric": "extra/hp_metric"}
    # TensorBoard's own reader gives the same last value and step for every tag.
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        series = data.series(run.key_map[tag]).dropna()
        assert (series.index[-1], series.iloc[-1]) == (
            events[-1].step, pytest.approx(events[-1].value)), tag
        assert len(series) == len({e.step for e in events})


def test_lm_eval_results_need_the_step(shared_data):
    folder = shared_data / "wild/lm_eval/03_v04_qwen25_many_tasks_2025/results/Qwen__Qwen2.5-1.5B"
    with pytest.raises(GapwatchError, match=r"no step in config.model_args' revision, .* give the step \(--step\)"):
        load(folder)
    run = load(folder, step=1000)
    data = run.to_run_data("qwen")
    assert list(data.scalars.index) == [1000]
    (results,) = folder.glob("*.json")
    doc = json.loads(results.read_text())
    acc = doc["results"]["arc_challenge"]["acc,none"]
    assert data.series("eval/downstream/arc_challenge/acc").iloc[-1] == pytest.approx(acc)


def _panel_columns(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows


def test_multi_run_panel_export_gives_each_run(shared_data):
    path = shared_data / "wild/wandb_csv/02_nanogpt_train_loss_export_2024/wandb_export.csv"
    runs = panel_runs(path)
    assert len(runs) == 8 and all("." in r or r == "gpt2" for r in runs)
    with pytest.raises(GapwatchError, match="panel export of 8 runs .* --all-runs"):
        load(path)
    rows = _panel_columns(path)
    lengths = set()
    for name in runs:
        run = load(path, source_run=name)
        assert run.name_hint == name
        loss = run.to_run_data(name).series(schema.TRAIN_LOSS)
        column = [(int(r["Step"]), float(r[f"{name} - train/loss"])) for r in rows
                  if r[f"{name} - train/loss"].strip()]
        assert (loss.index[-1], loss.iloc[-1]) == column[-1]
        assert len(loss) == len(column)
        # __MIN/__MAX are kept as the band around train/loss, cell for cell.
        data = run.to_run_data(name)
        for side in ("min", "max"):
            band = data.series(schema.band_key(schema.TRAIN_LOSS, side)).dropna()
            cells = [(int(r["Step"]), float(r[f"{name} - train/loss__{side.upper()}"]))
                     for r in rows if r[f"{name} - train/loss__{side.upper()}"].strip()]
            assert list(zip(band.index, band)) == cells
        lengths.add(len(loss))
    assert len(lengths) > 1  # runs of different lengths, each read to its own end
    with pytest.raises(GapwatchError, match="no run 'nope' in this panel export"):
        load(path, source_run="nope")


def test_runs_table_and_empty_files_are_refused_in_one_line(tmp_path, sqlite_url, capsys):
    table = tmp_path / "wandb_export_runs.csv"
    table.write_text('"Name","State","Notes","User","Tags","Created","Runtime","Sweep",'
                     '"lr","train/loss"\n"gpt2-a","finished","-","me","","2024-10-22T00:00:00Z",'
                     '"3600","","0.0006","3.1"\n')
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    for path, message in ((table, "a W&B runs table"), (empty, "empty file")):
        assert main(["import", str(path), "--run", "r", "--store", sqlite_url]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("gapwatch import: error:") and message in line
    assert "history" in str(runs_table_error(table))


def test_import_all_runs_of_a_panel_export_and_dry_run(shared_data, sqlite_url, capsys):
    path = shared_data / "wild/wandb_csv/02_nanogpt_train_loss_export_2024/wandb_export.csv"
    assert main(["import", str(path), "--all-runs", "--store", sqlite_url]) == 0
    capsys.readouterr()
    store = open_store(sqlite_url)
    try:
        assert sorted(store.list_runs()["name"]) == sorted(panel_runs(path))
    finally:
        store.close()
    # --dry-run prints only the mapping table, on stdout, and stores nothing.
    folder = _run_folder(shared_data, "10_llamafactory_dpo_2024")
    assert main(["import", str(folder), "--dry-run", "--store", sqlite_url]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.strip().splitlines()
    assert lines[0].split() == ["source", "key", "gapwatch", "metric", "cadence", "count", "why"]
    assert lines[1].split()[:3] == ["train/global_step", "(step", "axis)"]
    assert any(line.split()[:4] == ["train/num_input_tokens_seen", "train/tokens", "every", "10"]
               for line in lines)
    assert main(["import", str(folder), "--dry-run", "--step-key", "_nope"]) == 2
    assert "step key '_nope' is not logged" in capsys.readouterr().err
    # A panel export of several runs: the mapping of each.
    assert main(["import", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert [line[:-1] for line in out.splitlines() if line.endswith(":")] == panel_runs(path)


def test_the_readmes_dry_run_is_what_the_command_prints(shared_data, capsys):
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    block = readme.split("$ gapwatch import wandb/run-20240621_122906-qnolswhj --dry-run\n")[1]
    shown = [line for line in block.split("```")[0].splitlines() if line != "..."]
    assert len(shown) >= 5
    assert main(["import", str(_run_folder(shared_data, "10_llamafactory_dpo_2024")),
                 "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert all(line in printed for line in shown), set(shown) - set(printed)


def test_every_wild_file_has_a_test(shared_data):
    """A new file in wild/ must be read by one of the tests above."""
    wild = shared_data / "wild"
    cases = {c for c, *_ in WANDB_CASES}
    found = {p.name for p in (wild / "wandb").iterdir()}
    assert found == cases
    assert {p.name for p in (wild / "tensorboard").iterdir()} == {
        "01_lightning_torchtb_lstm_textgen_2024"}
    assert {p.name for p in (wild / "wandb_csv").iterdir()} == {
        "02_nanogpt_train_loss_export_2024"}
    assert {p.name for p in (wild / "lm_eval").iterdir()} == {"03_v04_qwen25_many_tasks_2025"}


def test_an_import_prints_a_short_mapping_and_dry_run_all_of_it(shared_data, sqlite_url, capsys):
    folder = shared_data / "wild/lm_eval/03_v04_qwen25_many_tasks_2025/results/Qwen__Qwen2.5-1.5B"
    assert main(["import", str(folder), "--run", "qwen", "--step", "1000", "--store",
                 sqlite_url]) == 0
    err = capsys.readouterr().err
    assert "... 233 more (--dry-run lists them all)" in err
    assert main(["import", str(folder), "--step", "1000", "--dry-run"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1 + 253


@pytest.mark.parametrize("case", ["11_cs336_custom_2025", "14_nanogpt_muon_2026"])
def test_wandb_history_as_jsonl_reads_like_the_run_file(shared_data, tmp_path, sqlite_url, case):
    """A run's W&B history as JSON Lines (what wandb < 0.10 kept as files/wandb-history.jsonl,
    and what `run.history()` saved by hand gives), made here from the real run file's rows:
    read on the trainer's step like the run file itself, whole (`load`) and streamed."""
    from monitor.importers import import_source
    from monitor.importers.wandb.run_file import parse_wandb_run

    folder = _run_folder(shared_data, case)
    raw = parse_wandb_run(folder).scalars
    path = tmp_path / "wandb-history.jsonl"
    with open(path, "w") as fh:
        for step, row in raw.groupby("step", sort=True):
            fh.write(json.dumps({"_step": int(step), **dict(zip(row["key"].astype(str),
                                                                 row["value"]))}) + "\n")
    want = load(folder).to_run_data("w").scalars
    got = load(path).to_run_data("j").scalars
    pd.testing.assert_frame_equal(got, want)
    with open_store(sqlite_url) as store:
        import_source(store, "streamed", path)
        stored = store.load_run("streamed").scalars
    pd.testing.assert_frame_equal(stored[sorted(stored.columns)], want, check_dtype=False,
                                  check_freq=False, check_names=False)
