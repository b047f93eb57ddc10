"""Two runs' recorded settings compared: the recipe's differences first, in one line for `detect`."""

from __future__ import annotations

import pandas as pd

from app.cli import main
from monitor.judging.settings_diff import compare_settings, summary_line
from monitor.schema import TRAIN_LOSS
from monitor.store import open_store

# A Hugging Face-like pair: architecture fields differ alongside the learning rate.
RUN = {"hidden_size": 2048, "num_hidden_layers": 24, "vocab_size": 32000, "learning_rate": 3e-4,
       "per_device_train_batch_size": 8, "seed": 1, "output_dir": "/a"}
REF = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "learning_rate": 1e-4,
       "per_device_train_batch_size": 8, "seed": 1, "logging_dir": "/b"}


def test_the_recipe_comes_before_the_architecture_and_one_sided_settings_last():
    diff = compare_settings(RUN, REF)
    assert [d.setting for d in diff.differences] == ["learning_rate", "hidden_size", "num_hidden_layers",
                                                     "logging_dir", "output_dir"]
    assert (diff.same, diff.total) == (3, 8)
    assert summary_line(diff, "run", "ref", most=2) == (
        "settings that differ from ref: learning_rate 0.0003 vs 0.0001, hidden_size 2048 vs 4096; "
        "1 more given differently; 2 recorded by one run only (gapwatch report lists them)")
    assert summary_line(compare_settings(RUN, RUN), "run", "ref") == "settings: the same 7 as ref"
    assert summary_line(compare_settings(RUN, {}), "run", "ref") == (
        "settings: only run recorded its settings: nothing to compare them with")


def test_one_setting_that_two_trainers_name_differently_is_compared_as_one():
    ours = {"optim": {"lr": 5e-3, "grad_clip": 1.0, "warmup_steps": 20}, "model": {"max_seq_len": 32}, "seed": 0}
    nanogpt = {"learning_rate": 6e-4, "grad_clip": 1.0, "warmup_iters": 100, "block_size": 1024, "seed": 0}
    diff = compare_settings(ours, nanogpt)
    assert [(d.setting, d.run, d.reference) for d in diff.differences] == [
        ("optim.lr / learning_rate", "0.005", "0.0006"), ("optim.warmup_steps / warmup_iters", "20", "100"),
        ("model.max_seq_len / block_size", "32", "1024")]
    assert (diff.same, diff.total) == (2, 5)  # the seed, and the clipping under two names
    # A thing recorded under two names by one run is not guessed at: both stay one-sided.
    twice = compare_settings({"lr": 1e-3, "optimizer": {"lr": 1e-3}}, {"learning_rate": 1e-3})
    assert sorted(d.setting for d in twice.differences) == ["learning_rate", "lr", "optimizer.lr"]


def test_a_lightning_run_and_a_nanogpt_run_from_their_own_files(shared_data):
    from monitor.importers import load

    wild = shared_data / "wild"
    lightning = load(wild / "tensorboard" / "01_lightning_torchtb_lstm_textgen_2024" / "lightning_logs" / "version_0")
    (folder,) = (wild / "wandb" / "14_nanogpt_muon_2026" / "wandb").glob("run-*")
    nanogpt = load(folder)
    both = [(d.setting, d.run, d.reference) for d in compare_settings(lightning.config, nanogpt.config).differences
            if d.both]
    assert both == [("lr / learning_rate", "0.001", "0.0006"), ("seq_length / block_size", "100", "1024")]


def test_an_import_with_a_reference_says_where_the_recipes_differ(shared_data, sqlite_url, capsys):
    wild = shared_data / "wild"
    lightning = wild / "tensorboard" / "01_lightning_torchtb_lstm_textgen_2024" / "lightning_logs" / "version_0"
    (nanogpt,) = (wild / "wandb" / "14_nanogpt_muon_2026" / "wandb").glob("run-*")
    assert main(["import", str(lightning), "--run", "lstm", "--store", sqlite_url]) == 0
    assert "settings" not in capsys.readouterr().err  # nothing to compare with yet
    assert main(["import", str(nanogpt), "--run", "gpt", "--reference", "lstm", "--store", sqlite_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "settings that differ from lstm: learning_rate / lr 0.0006 vs 0.001, block_size / seq_length 1024 vs 100" \
        in err
    # The other way round: the imported run becomes another's reference.
    assert main(["import", str(nanogpt), "--run", "gpt2", "--reference-of", "lstm", "--store", sqlite_url]) == 0
    assert "settings that differ from gpt2: lr / learning_rate 0.001 vs 0.0006" in " ".join(capsys.readouterr().err.split())


def test_detect_says_where_the_recipes_differ(sqlite_url, capsys):
    with open_store(sqlite_url) as store:
        for name, config in (("run", RUN), ("ref", REF)):
            store.ensure_run(name, config=config, reference="ref" if name == "run" else None)
            store.write_metrics(name, pd.DataFrame({"step": range(50), "key": TRAIN_LOSS, "value": 3.0}))
    assert main(["detect", "--run", "run", "--store", sqlite_url, "--no-write"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "settings that differ from ref: learning_rate 0.0003 vs 0.0001, hidden_size 2048 vs 4096" in err
