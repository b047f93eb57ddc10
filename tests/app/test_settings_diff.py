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


def test_detect_says_where_the_recipes_differ(sqlite_url, capsys):
    with open_store(sqlite_url) as store:
        for name, config in (("run", RUN), ("ref", REF)):
            store.ensure_run(name, config=config, reference="ref" if name == "run" else None)
            store.write_metrics(name, pd.DataFrame({"step": range(50), "key": TRAIN_LOSS, "value": 3.0}))
    assert main(["detect", "--run", "run", "--store", sqlite_url, "--no-write"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "settings that differ from ref: learning_rate 0.0003 vs 0.0001, hidden_size 2048 vs 4096" in err
