"""Lightning's hparams.yaml as a run's settings: plain values, Python-tagged ones read as their
contents (never constructed), and a file that is no mapping said so without failing the import."""

from __future__ import annotations

from monitor.importers import load
from monitor.importers.hparams_file import read_hparams


def test_tagged_values_are_read_as_their_contents(tmp_path):
    (tmp_path / "hparams.yaml").write_text(
        "args: !!python/object:argparse.Namespace\n  lr: 0.001\n  layers: 4\n"
        "betas: !!python/tuple\n- 0.9\n- 0.95\n"
        "started: 2024-05-26\n"
        "scheduler: !cosine {warmup: 100}\n")
    config, note = read_hparams(tmp_path)
    assert note is None
    assert config == {"args": {"lr": 0.001, "layers": 4}, "betas": [0.9, 0.95], "started": "2024-05-26",
                      "scheduler": {"warmup": 100}}


def test_no_file_an_empty_one_and_unreadable_ones(tmp_path):
    assert read_hparams(tmp_path) == ({}, None)
    (tmp_path / "hparams.yaml").write_text("")
    assert read_hparams(tmp_path) == ({}, None)
    (tmp_path / "hparams.yaml").write_text("- a list\n- of things\n")
    config, note = read_hparams(tmp_path)
    assert config == {} and "not read as the run's settings (a list, not a mapping)" in note
    (tmp_path / "hparams.yaml").write_text("lr: [0.1\n")
    config, note = read_hparams(tmp_path)
    assert config == {} and note.startswith(f"{tmp_path / 'hparams.yaml'}: not read as the run's settings (")


def test_a_broken_hparams_file_costs_only_the_settings(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,train_loss\n0,3.0\n1,2.9\n")
    (tmp_path / "hparams.yaml").write_text("lr: [0.1\n")
    run = load(tmp_path / "metrics.csv")
    assert run.config == {} and run.key_map == {"train_loss": "train/loss"}
    assert any("not read as the run's settings" in n for n in run.notes)


def test_the_settings_reach_the_store_through_the_streamed_import(tmp_path, sqlite_url):
    from app.cli import main
    from monitor.store import open_store

    (tmp_path / "metrics.csv").write_text("step,train_loss\n0,3.0\n1,2.9\n")
    (tmp_path / "hparams.yaml").write_text("lr: 0.0003\nbatch_size: 64\n")
    assert main(["import", str(tmp_path / "metrics.csv"), "--run", "pl", "--store", sqlite_url]) == 0
    with open_store(sqlite_url, read_only=True) as store:
        assert store.run_info("pl").config == {"lr": 0.0003, "batch_size": 64}
