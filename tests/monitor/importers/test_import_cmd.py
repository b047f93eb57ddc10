"""`gapwatch import` through the real CLI entry point."""

from __future__ import annotations

import json
import threading
import time

import pytest

from app.cli import main
from monitor import schema
from monitor.store import open_store


def test_import_then_again(sqlite_url, shared_data, capsys):
    src = shared_data / "runs/olmo-wandb-exports/ladder/peteish-moreeval__190M-1xC.csv"
    assert main(["import", str(src), "--run", "olmo-190m", "--store", sqlite_url]) == 0
    out = capsys.readouterr().err
    assert "created run 'olmo-190m'" in out and "profile olmo" in out
    assert main(["import", str(src), "--run", "olmo-190m", "--store", sqlite_url]) == 0
    assert "0 new rows" in capsys.readouterr().err
    store = open_store(sqlite_url)
    assert len(store.load_run("olmo-190m").series("eval/heldout/c4_en-validation/loss")) == 37
    store.close()


def test_a_run_without_run_is_stored_under_the_name_its_source_gives(sqlite_url, shared_data, tmp_path, capsys):
    folder = shared_data / "wild/wandb/14_nanogpt_muon_2026/wandb/run-20260329_130713-zi7a94pe"
    assert main(["import", str(folder), "--store", sqlite_url]) == 0
    # The W&B run's display name, as the W&B UI shows it; said so, with how to choose another.
    assert "created run 'cosine' (the source's name; --run NAME names it otherwise)" in capsys.readouterr().err
    assert main(["import", str(folder), "--store", sqlite_url]) == 0
    assert "updated run 'cosine'" in (out := capsys.readouterr().err) and "0 new rows" in out
    log = tmp_path / "seed-7.jsonl"  # a streamed log: its file's stem
    log.write_text("".join(json.dumps({"step": s, "train/loss": 3.0 - s / 100}) + "\n" for s in range(1, 6)))
    assert main(["import", str(log), "--store", sqlite_url]) == 0
    assert "created run 'seed-7'" in capsys.readouterr().err
    with open_store(sqlite_url) as store:
        assert len(store.load_run("cosine").series(schema.TRAIN_LOSS)) > 0
        assert len(store.load_run("seed-7").series(schema.TRAIN_LOSS)) == 5
    assert main(["import", str(log), "--follow", "--store", sqlite_url]) == 2
    assert "--follow needs --run NAME" in capsys.readouterr().err


def test_errors_are_one_line_with_exit_code_2(sqlite_url, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("_step,train/loss\n2,1.0\n1,0.9\n")
    assert main(["import", str(bad), "--run", "x", "--store", sqlite_url]) == 2
    *phases, err = capsys.readouterr().err.strip().splitlines()
    # Into a log (stderr is no terminal here) a line per phase comes first; the error is one line.
    assert all(line.startswith("gapwatch import: [") for line in phases)
    assert err.startswith("gapwatch import: error:") and "line 3" in err
    assert main(["import", "wandb://e/p/r", "--run", "x", "--store", sqlite_url,
                 "--wandb-base-url", "http://127.0.0.1:1"]) == 2
    assert "unreachable" in capsys.readouterr().err


def test_follow_a_growing_jsonl_until_idle(sqlite_url, tmp_path, capsys):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "train/loss": 3 - s / 100}) + "\n"
                           for s in range(10)))

    def append_later():
        time.sleep(0.5)
        with log.open("a") as fh:
            fh.write("".join(json.dumps({"step": s, "train/loss": 3 - s / 100}) + "\n"
                             for s in range(10, 15)))

    writer = threading.Thread(target=append_later)
    writer.start()
    code = main(["import", str(log), "--run", "j", "--store", sqlite_url, "--follow",
                 "--poll-interval", "0.2", "--idle-timeout", "2"])
    writer.join()
    assert code == 0
    err = capsys.readouterr().err
    assert "poll 1: 10 new rows" in err and "5 new rows" in err
    store = open_store(sqlite_url)
    assert store.load_run("j").series(schema.TRAIN_LOSS).index.max() == 14
    store.close()


def test_a_pasted_wandb_run_page_is_read_as_its_wandb_url(sqlite_url, capsys):
    # The server is dead on purpose: what matters is that the page became the run, not a path.
    assert main(["import", "https://wandb.ai/e/p/runs/abc123/overview?nw=x", "--run", "x", "--store", sqlite_url,
                 "--wandb-base-url", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "importing the W&B run page https://wandb.ai/e/p/runs/abc123/overview?nw=x as wandb://e/p/abc123" in err
    assert "unreachable" in err and "no such file" not in err


@pytest.mark.parametrize("source, message", [
    ("https://wandb.ai/e/p", "a W&B page, but not a run's; open the run and paste its address"),
    ("https://wandb.example.org/e/p/runs/abc123",
     "if https://wandb.example.org is a W&B server, import wandb://e/p/abc123 --wandb-base-url "
     "https://wandb.example.org"),
    ("https://example.org/metrics.csv", "gapwatch does not download https:// URLs; import a W&B run as wandb://"),
    ("gopher://host/metrics.csv", "gapwatch does not download gopher:// URLs"),
    # An object store's scheme without its filesystem's package installed.
    ("s3://bucket/metrics.csv", "Install s3fs to access S3"),
])
def test_other_urls_are_refused_in_one_line_that_says_what_to_write(sqlite_url, capsys, source, message):
    assert main(["import", source, "--store", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gapwatch import: error: {source}: ") and message in err and err.count("\n") == 1


def test_one_row_of_one_metric_is_counted_in_the_singular(sqlite_url, tmp_path, capsys):
    log = tmp_path / "one.jsonl"
    log.write_text(json.dumps({"step": 1, "train/loss": 3.0}) + "\n")
    assert main(["import", str(log), "--run", "one", "--store", sqlite_url]) == 0
    assert "1 new row, 1 source row in all, 1 metric" in capsys.readouterr().err


def test_the_summary_is_one_line_however_long_for_a_script_reading_it(sqlite_url, tmp_path, capsys):
    log = tmp_path / ("a-run-folder-with-a-long-name-" * 3) / "metrics.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps({"step": s, "train/loss": 3.0}) + "\n" for s in range(1, 4)))
    assert main(["import", str(log), "--run", "long", "--store", sqlite_url]) == 0
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("created run")]
    assert line.endswith("3 new rows, 3 source rows in all, 1 metric")


def test_the_help_names_every_format_detection_knows():
    from app.commands.import_cmd import FORMAT_HELP
    from monitor.importers import FORMATS

    named = set(FORMAT_HELP.removesuffix(" (default: detected)").split(", "))
    assert named == {f.name for f in FORMATS}
