"""Inputs that used to crash an import or pass in silence: each now ends in one clear line."""

from __future__ import annotations

import json
import struct

import pytest

from app.cli import main
from monitor.store import open_store


def import_error(source, sqlite_url, capsys, run="r") -> str:
    """The one line `gapwatch import` prints for a source it refuses (exit status 2)."""
    assert main(["import", str(source), "--run", run, "--store", sqlite_url]) == 2
    # Progress lines (one per phase, stderr being no terminal here) come first; the error is one line.
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if line.startswith("gapwatch import: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0] and not any("Traceback" in line for line in lines)
    return errors[0]


def write(path, text):
    path.write_text(text)
    return path


def test_deeply_nested_jsonl(tmp_path, sqlite_url, capsys):
    beyond_parser = write(tmp_path / "deep.jsonl", '{"step": 1, ' + '"a": {' * 5000 + '"b": 1' + "}" * 5001 + "\n")
    assert "line 1: nested far deeper than 32 levels" in import_error(beyond_parser, sqlite_url, capsys)
    beyond_limit = write(tmp_path / "deep40.jsonl", '{"step": 1, ' + '"a": {' * 40 + '"b": 1' + "}" * 41 + "\n")
    assert "line 1: nested more than 32 levels deep" in import_error(beyond_limit, sqlite_url, capsys)


def test_a_step_beyond_64_bits(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "huge.jsonl", '{"step": 99999999999999999999999, "train/loss": 1.0}\n')
    assert "line 1: step 99999999999999999999999 is beyond the largest step" in import_error(src, sqlite_url, capsys)


def test_a_large_step_within_64_bits_is_kept_exactly(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "big.jsonl", '{"step": 9007199254740993, "train/loss": 1.0}\n')
    assert main(["import", str(src), "--run", "big", "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        assert store.load_run("big").scalars.index.tolist() == [9007199254740993]  # 2**53 + 1


@pytest.mark.parametrize("doc, message", [
    ({"results": {"hellaswag": {"acc,none": 0.5}}, "config": "hf"}, "'config' is a str, not a mapping"),
    ({"results": {"hellaswag": {"acc,none": 0.5}}, "config": {"model_args": "revision=step10"},
      "n-samples": {"hellaswag": "100"}}, "'n-samples'['hellaswag'] is a str, not a mapping"),
    ({"results": {}, "config": {"model_args": "revision=step10"}}, "the lm-eval 'results' are empty"),
])
def test_lm_eval_files_of_the_wrong_shape(tmp_path, sqlite_url, capsys, doc, message):
    src = write(tmp_path / "results.json", json.dumps(doc))
    assert message in import_error(src, sqlite_url, capsys)


def test_a_header_only_wandb_file(tmp_path, sqlite_url, capsys):
    src = tmp_path / "run-x.wandb"
    src.write_bytes(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    assert "no logged metrics in this W&B run file" in import_error(src, sqlite_url, capsys)


def test_a_csv_with_repeated_steps_says_so_and_the_last_value_wins(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "rep.csv", "step,train/loss\n" + "".join(f"{s},{v}\n" for s, v in
                                                                   [(0, 1), (1, 2), (2, 3), (2, 4), (3, 5)]))
    assert main(["import", str(src), "--run", "rep", "--store", sqlite_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "1 values repeat a metric at a step an earlier line gave (first: train/loss at step 2); the last value wins" in err
    assert "4 new rows" in err
    with open_store(sqlite_url) as store:
        assert store.load_run("rep").scalars["train/loss"].tolist() == [1, 2, 4, 5]


def test_a_csv_with_too_many_columns(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "wide.csv", "step," + ",".join(f"m/c{i}" for i in range(10_001)) + "\n1," +
                ",".join("1" for _ in range(10_001)) + "\n")
    assert "10,002 columns; at most 10,000 metrics are read from one file" in import_error(src, sqlite_url, capsys)


def test_a_jsonl_with_too_many_metric_names(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "wide.jsonl", "".join(json.dumps({"step": s, **{f"m/c{s}_{i}": 1 for i in range(1000)}}) + "\n"
                                               for s in range(11)))
    assert "line 11: more than 10,000 metric names" in import_error(src, sqlite_url, capsys)


def test_a_run_name_of_only_spaces(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "ok.jsonl", '{"step": 1, "train/loss": 1.0}\n')
    assert "run name '   ' is blank" in import_error(src, sqlite_url, capsys, run="   ")
