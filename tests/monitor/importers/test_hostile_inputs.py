"""Inputs that used to crash an import or pass in silence: each now ends in one clear line."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

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
    # Step 1 repeats its value (nothing lost, nothing said); step 2 is given another one.
    src = write(tmp_path / "rep.csv", "step,train/loss\n" + "".join(f"{s},{v}\n" for s, v in
                                                                   [(0, 1), (1, 2), (1, 2), (2, 3), (2, 4), (3, 5)]))
    assert main(["import", str(src), "--run", "rep", "--store", sqlite_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("1 values of a metric at a step a later line gives another value for "
            "(first: train/loss at step 2); the last value wins") in err
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


WILD = Path(__file__).resolve().parents[4] / "shared" / "data" / "wild"
if not WILD.is_dir():
    WILD = Path("/work/shared/data/wild")
LM_EVAL_DOC = {"results": {"hellaswag": {"acc,none": 0.5}}, "config": {"model_args": "revision=step10"}}


def cli_in_subprocess(*args, timeout=60):
    """`gapwatch` in a child process, for inputs that once killed the process or blocked it."""
    return subprocess.run([sys.executable, "-m", "app", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("text", ["null\n", "null\nnull\nnull\n",
                                  '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n"])
def test_jsonl_that_crashed_pyarrow_ends_in_one_line(tmp_path, sqlite_url, text):
    src = write(tmp_path / "bad.jsonl", text)
    done = cli_in_subprocess("import", src, "--run", "r", "--store", sqlite_url)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"gapwatch import: error: {src}: line 1: ") and "Traceback" not in done.stderr


def test_a_named_pipe_is_refused_not_waited_on(tmp_path, sqlite_url):
    pipe = tmp_path / "live.jsonl"
    os.mkfifo(pipe)
    done = cli_in_subprocess("import", pipe, "--run", "r", "--store", sqlite_url, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"{pipe}: a named pipe, not a regular file or folder: only files are imported")


@pytest.mark.parametrize("name, content, message", [
    ("rand.csv", bytes(random.Random(1).randrange(256) for _ in range(5000)), "rand.csv: "),
    ("big.json", json.dumps(LM_EVAL_DOC).replace("0.5", "9" * 400).encode(),
     "the number '" + "9" * 79 + "... (402 characters) does not fit a 64-bit float"),
    ("rev.json", json.dumps({**LM_EVAL_DOC, "config": {"model_args": f"revision=step{2**70}"}}).encode(),
     f"the step of revision 'step{2**70}' is beyond the largest step a store keeps"),
    ("deep.json", b"[" * 50_000 + b"]" * 50_000, "JSON nested too deep to be lm-eval results"),
    ("inf.jsonl", b'{"step": 1, "train/loss": 1.0}\n{"step": 2, "train/loss": 1e309}\n',
     "line 2: the number '1e309' does not fit a 64-bit float"),
    ("int.jsonl", b'{"step": 1, "train/loss": ' + b"9" * 400 + b"}\n", "line 1: the number '999"),
    ("inf.csv", b"step,train/loss\n1,1.0\n2,1e309\n", "line 3: 'train/loss': the number '1e309' does not fit a 64-bit float"),
    ("true.csv", b"step,train/loss\ntrue,1.0\n", "line 2: step 'true' is not a whole number >= 0"),
    ("dup.csv", b"step,train/loss,train/loss\n1,1.0,2.0\n", "column 'train/loss' appears twice in the header"),
    ("header.csv", b"Step,r - train/loss,r - train/loss__MIN,r - train/loss__MAX\n", "a header and no rows: no history to import"),
    ("empty.csv", b"Step,r - train/loss\n1,\n2,\n", "every metric cell is empty: no history to import"),
    ("step64.csv", b"_step,train/loss\n18446744073709551616,1.0\n", "line 2: step 18446744073709551616 is outside the steps a store keeps"),
    ("dup_wandb.csv", b"_step,train/loss,train/loss\n1,1.0,2.0\n", "column 'train/loss' appears twice"),
    ("inf_wandb.csv", b"_step,train/loss\n1,1e309\n", "line 2: column 'train/loss': the number '1e309' does not fit a 64-bit float"),
    ("step64.log", b"s:18446744073709551616 trl:2.5\n", "line 1: step 18446744073709551616 is beyond the largest step"),
    ("inf.log", b"s:1 trl:1e309\n", "line 1: trl: the number '1e309' does not fit a 64-bit float"),
    # The same inputs in the other formats that can hold them.
    ("inf.json", json.dumps(LM_EVAL_DOC).replace("0.5", "1e309").encode(),
     "the number '1e309' does not fit a 64-bit float"),
    ("rev64.json", json.dumps({**LM_EVAL_DOC, "config": {"model_args": f"revision=step{2**64}"}}).encode(),
     f"the step of revision 'step{2**64}' is beyond the largest step a store keeps"),
    ("step64.jsonl", b'{"step": 18446744073709551616, "train/loss": 1.0}\n',
     "line 1: step 18446744073709551616 is beyond the largest step a store keeps"),
    ("true.jsonl", b'{"step": true, "train/loss": 1.0}\n', "line 1: step True is not a whole number >= 0"),
    ("true_wandb.csv", b"_step,train/loss\ntrue,1.0\n", "line 2: column '_step': 'true' is not a number"),
    ("header_generic.csv", b"step,train/loss\n", "no metric values found"),
    ("empty_generic.csv", b"step,train/loss\n1,\n2,\n", "no metric values found"),
    ("header_wandb.csv", b"_step,train/loss\n", "a header and no rows: no history to import"),
    ("dup.jsonl", b'{"step": 1, "train/loss": 1.0, "train/loss": 2.0}\n',
     "line 1: not valid JSON (the name 'train/loss' appears twice in one object)"),
    ("dup.json", b'{"results": {"hellaswag": {"acc,none": 0.5, "acc,none": 0.7}}, '
                 b'"config": {"model_args": "revision=step10"}}',
     "the name 'acc,none' appears twice in one object"),
    ("long.jsonl", ('{"step": 1, "' + "m" * 5_000_000 + '": 1.0}\n').encode(),
     "... (5,000,000 characters))"),
    ("step64_fairseq.log", b'2021-10-28 16:00:00 | INFO | train_inner | {"num_updates": "18446744073709551616", '
                           b'"loss": "2.5"}\n', "line 1: num_updates 18446744073709551616 is beyond the largest step"),
    ("bad_step_fairseq.log", b'2021-10-28 16:00:00 | INFO | train_inner | {"num_updates": "1+00", "loss": "2.5"}\n',
     "line 1: num_updates '1+00' is not a whole number"),
    ("bad_step_simple.log", b"2021-10-28 16:00:00 | INFO | train_inner | epoch 001:    100 / 5000 loss=2.5, "
                            b"num_updates=300,{lr=0\n", "line 1: num_updates '300,{lr=0' is not a whole number"),
    ("step64_composer.log", b"[batch=18446744073709551616/10]:\n\t Train loss/train/total: 2.5\n",
     "line 1: batch 18446744073709551616 is beyond the largest step"),
    ("step64_olmo.log", b"[step=18446744073709551616/10,epoch=0]\n    train/CE loss=2.5\n",
     "line 1: step 18446744073709551616 is beyond the largest step"),
    ("rand.parquet", random.Random(2).randbytes(5000), "not a readable Parquet file"),
])
def test_hostile_files_end_in_one_line_and_leave_the_stored_run_alone(tmp_path, sqlite_url, capsys, name,
                                                                      content, message):
    good = write(tmp_path / "good.jsonl", '{"step": 5, "train/loss": 2.0}\n')
    assert main(["import", str(good), "--run", "kept", "--store", sqlite_url]) == 0
    src = tmp_path / name
    src.write_bytes(content)
    capsys.readouterr()
    assert message in import_error(src, sqlite_url, capsys)
    with open_store(sqlite_url) as store:
        assert store.list_runs()["name"].tolist() == ["kept"]
        scalars = store.load_run("kept").scalars
        assert scalars.index.tolist() == [5] and scalars["train/loss"].tolist() == [2.0]


def test_a_long_name_is_cut_short_in_the_message(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "long.csv", "step," + "m" * 5_000_000 + "\n1,abc\n")
    line = import_error(src, sqlite_url, capsys)
    assert "(5,000,002 characters)" in line and len(line) < 400


def test_a_long_name_beside_good_ones_is_cut_short_in_the_mapping(tmp_path, sqlite_url, capsys):
    src = write(tmp_path / "mixed.jsonl", json.dumps({"step": 1, "train/loss": 1.0, "m" * 5_000_000: 1.0}) + "\n")
    assert main(["import", str(src), "--run", "r", "--store", sqlite_url]) == 0
    err = capsys.readouterr().err
    assert "(5,000,000 characters)" in err and len(err) < 2000
    assert main(["import", str(src), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "(5,000,000 characters)" in out and len(out) < 2000


@pytest.mark.parametrize("args, message", [
    (["--tokens-per-step", "nan"], "--tokens-per-step must be a positive number, not nan"),
    (["--tokens-per-step", "inf"], "--tokens-per-step must be a positive number, not inf"),
    (["--step", str(2**64)], f"step {2**64} is not a step a store keeps (0 to 9223372036854775807)"),
])
def test_out_of_range_options(tmp_path, sqlite_url, capsys, args, message):
    src = write(tmp_path / "results.json", json.dumps({**LM_EVAL_DOC, "config": {"model_args": "x=1"}}))
    assert main(["import", str(src), "--run", "r", "--store", sqlite_url, *args]) == 2
    assert capsys.readouterr().err.strip().endswith(message)


def test_a_wandb_file_with_a_zeroed_block_is_refused_not_imported_short(tmp_path, sqlite_url, capsys):
    (real,) = (WILD / "wandb" / "08_alpaca_hftrainer_2023").rglob("*.wandb")
    data = bytearray(real.read_bytes())
    data[32 * 1024:64 * 1024] = bytes(32 * 1024)  # the second block, as a failing disk leaves it
    src = tmp_path / "run-zeroed.wandb"
    src.write_bytes(bytes(data))
    line = import_error(src, sqlite_url, capsys)
    assert "at byte 32768: zeros where a record should start" in line and "unreadable" in line


def test_a_wandb_csv_step_beyond_2_53_is_kept_exactly(tmp_path, sqlite_url):
    src = write(tmp_path / "big.csv", "_step,train/loss\n9007199254740993,1.0\n")
    assert main(["import", str(src), "--run", "big", "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        assert store.load_run("big").scalars.index.tolist() == [9007199254740993]


def test_a_huge_power_in_a_logged_setting_is_kept_as_text(tmp_path, sqlite_url):
    src = write(tmp_path / "train.log", "class Hyperparameters:\n    batch_size : int = 9**9**9**9\ns:1 trl:2.0\n")
    done = cli_in_subprocess("import", src, "--run", "r", "--store", sqlite_url, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("value", ["1e309", "9" * 400])
def test_a_wandb_value_no_float_holds_is_refused(tmp_path, sqlite_url, capsys, value):
    from wandb.proto import wandb_internal_pb2 as wpb

    from bench.wandb_log_writer import encode_log

    records = []
    for num, (step, text) in enumerate([(0, "1.5"), (1, value)], start=1):
        rec = wpb.Record(num=num)
        rec.history.item.add(key="_step", value_json=str(step))
        rec.history.item.add(key="train/loss", value_json=text)
        records.append(rec.SerializeToString())
    src = tmp_path / "run-x.wandb"
    src.write_bytes(encode_log(records))
    assert f"record 2: the number '{value[:79]}" in import_error(src, sqlite_url, capsys)


def test_a_wandb_step_of_2_64_is_refused_not_read_as_negative(tmp_path, sqlite_url, capsys):
    from bench.fuzz_corpus import hostile_wandb

    src = tmp_path / "run-x.wandb"
    src.write_bytes(hostile_wandb()["step 2**64"][0])
    line = import_error(src, sqlite_url, capsys)
    assert "record 2: _step 1.8446744073709552e+19 is not a whole number from 0 to 2**63 - 1" in line
    assert "-9223372036854775808" not in line
