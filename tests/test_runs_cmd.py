"""`gapwatch runs` on a store with runs that have, and lack, a reference and metrics; setting a
reference and a run's facts, renaming and removing runs; a mistyped store path is one error and creates nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from app.cli import main
from monitor.detectors.data_invariants import DataInvariants
from monitor.judging.judge import detect_stored, load_not_judged
from monitor.errors import GapwatchError
from monitor.schema import DATA_CURSOR, Detection, Severity
from monitor.store import open_store
from monitor.watch.run_watcher import state_name


@pytest.fixture
def three_runs(store_url):
    with open_store(store_url) as store:
        store.ensure_run("ref")
        store.ensure_run("cand", reference="ref")
        store.ensure_run("other", reference="ref")
        store.write_metrics("cand", pd.DataFrame({"step": [0, 1, 2], "key": "train/loss", "value": [3.0, 2.0, 1.0]}))
        store.write_metrics("ref", pd.DataFrame({"step": [0, 1, 2], "key": "train/loss", "value": [3.0, 2.1, 1.1]}))
    return store_url


def test_lists_runs_with_and_without_references(three_runs, capsys):
    assert main(["runs", "--store", three_runs]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split("\t") == ["run", "health", "status", "source", "reference", "last step", "last metric",
                                  "attempts", "open alerts"]
    rows = {line.split("\t")[0]: line.split("\t") for line in lines}
    assert rows["cand"][4:6] == ["ref", "2"] and rows["ref"][4:6] == ["-", "2"] and rows["other"][5] == "-"
    assert {r[1] for r in rows.values()} == {"not judged"}  # nothing has judged any of them yet
    with open_store(three_runs) as store:
        detect_stored(store, "cand")
    assert main(["runs", "--store", three_runs, "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cand"]["reference"] == "ref" and rows["cand"]["last_step"] == 2
    assert rows["other"]["reference"] == "ref" and rows["other"]["last_step"] is None
    assert rows["ref"]["reference"] is None
    # As the dashboard's runs table says (app/run_health.py): judged by detect, nothing found.
    assert rows["cand"]["health"] == "ok" and rows["ref"]["health"] == "not judged"


def test_a_reference_named_before_it_was_imported_is_said_to_be_missing(three_runs, capsys):
    with open_store(three_runs) as store:
        store.ensure_run("early", reference="imported-later")  # Monitor(..., reference=...) before the import
    assert main(["runs", "--store", three_runs]) == 0
    rows = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["early"][4] == "imported-later (not in the store)" and rows["cand"][4] == "ref"
    assert main(["runs", "--store", three_runs, "--json"]) == 0
    assert {r["name"]: r["reference"] for r in json.loads(capsys.readouterr().out)}["early"] == "imported-later"


def test_long_names_are_whole_in_a_pipe(sqlite_url):
    names = [f"olmo1b-ladder-{kind}-with-a-name-longer-than-a-terminal-is-wide" for kind in ("run", "rerun")]
    with open_store(sqlite_url) as store:
        for name in names:
            store.ensure_run(name)
    out = subprocess.run([sys.executable, "-m", "app", "runs", "--store", sqlite_url], capture_output=True,
                         text=True, timeout=120, env={"COLUMNS": "40", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert sorted(line.split("\t")[0] for line in out.stdout.splitlines()[1:]) == sorted(names)


def nan_detection(run: str, reference: str | None = None) -> Detection:
    return Detection(run=run, detector="nonfinite", metric="train/loss", start_step=1, end_step=1, peak_step=1,
                     score=1.0, severity=Severity.CRITICAL, message="NaN", evidence={}, reference=reference)


def test_set_reference_and_clear_it(three_runs, capsys):
    assert main(["runs", "set-reference", "ref", "other", "--store", three_runs]) == 0
    assert main(["runs", "--store", three_runs, "set-reference", "cand", "--none"]) == 0
    with open_store(three_runs) as store:
        assert store.get_run("ref")["reference"] == "other" and store.get_run("cand")["reference"] is None
    capsys.readouterr()
    for argv, problem in ((["ref", "nope"], "no run named 'nope'"), (["nope", "ref"], "no run named 'nope'"),
                          (["ref", "ref"], "cannot be its own reference")):
        assert main(["runs", "set-reference", *argv, "--store", three_runs]) == 2
        err = capsys.readouterr().err
        assert problem in err and err.count("\n") == 1


def test_rename_keeps_everything_and_the_runs_that_refer_to_it(three_runs, capsys):
    with open_store(three_runs) as store:
        detect_stored(store, "cand")  # what it could not judge is saved under "cand"
        assert load_not_judged(store, "cand").items
        store.write_detections([nan_detection("cand", reference="ref")])
        store.save_state("watch/cand", {"version": 0})
    assert main(["runs", "rename", "ref", "baseline", "--store", three_runs]) == 0
    assert main(["runs", "rename", "cand", "candidate", "--store", three_runs]) == 0
    with open_store(three_runs) as store:
        assert store.get_run("cand") is None and store.get_run("ref") is None
        assert store.get_run("candidate")["reference"] == "baseline"
        assert store.get_run("other")["reference"] == "baseline"
        assert len(store.read_scalars(["candidate"], ["train/loss"])) == 3
        (found,) = store.read_detections("candidate")
        assert (found.run, found.reference, found.message) == ("candidate", "baseline", "NaN")
        assert store.load_state("watch/cand") is None and load_not_judged(store, "cand") is None
    capsys.readouterr()
    assert main(["runs", "rename", "candidate", "other", "--store", three_runs]) == 2
    assert "a run named 'other' is already in" in capsys.readouterr().err


def test_rm_keeps_a_reference_others_use_unless_forced(three_runs, capsys):
    with open_store(three_runs) as store:
        alert = store.alerts.insert("ref", {"attempt": 0, "detector": "nonfinite", "metric": "train/loss",
                                            "state": "open", "severity": "critical", "start_step": 1, "end_step": 1,
                                            "peak_step": 1, "score": 1.0, "message": "NaN", "evidence": "{}",
                                            "opened_at": 0.0, "updated_at": 0.0})
        store.outbox.add([{"alert_id": alert, "sink": "console", "kind": "opened", "payload": "{}",
                           "dedup_key": "k1", "created_at": 0.0, "next_try_at": 0.0}])
        store.write_detections([nan_detection("ref")])
    assert main(["runs", "rm", "ref", "--store", three_runs]) == 2
    assert "is the reference of cand, other" in capsys.readouterr().err
    assert main(["runs", "rm", "cand", "nope", "--store", three_runs]) == 2  # all or nothing
    with open_store(three_runs) as store:
        assert store.get_run("cand") is not None
    assert main(["runs", "rm", "ref", "--force", "--store", three_runs]) == 0
    with open_store(three_runs) as store:
        assert store.get_run("ref") is None and store.get_run("cand")["reference"] is None
        assert store.outbox.pending_count() == 0 and store.read_detections() == []
        assert store.alerts.list() == []


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--json"], ["runs", "rename", "a", "b"], ["runs", "rm", "a"],
                                  ["runs", "set-reference", "a", "b"], ["runs", "set", "a", "--global-batch-size", "8"], ["detect", "--run", "a"],
                                  ["detect", "--run", "a", "--no-write"], ["report", "--run", "a"],
                                  ["watch", "--run", "a", "--once"]])
def test_a_mistyped_store_path_is_one_error_and_creates_nothing(tmp_path, capsys, argv):
    missing = tmp_path / "no" / "such" / "folder" / "store.db"
    assert main([*argv, "--store", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"error: no gapwatch store at {missing}") and len(err) == 1, err
    assert not (tmp_path / "no").exists()


def test_an_empty_postgresql_database_is_not_a_store_to_change(pg_url, capsys):
    assert main(["runs", "rm", "a", "--store", pg_url]) == 2
    assert "holds no gapwatch store yet" in capsys.readouterr().err
    with pytest.raises(GapwatchError, match="holds no gapwatch store yet"):
        open_store(pg_url, read_only=True)  # still empty: nothing was created


def test_set_records_the_facts_a_source_did_not_say_and_the_data_checks_use_them(store_url, capsys):
    steps = list(range(1, 301))
    cursor = [8 * s + (8 if s >= 150 else 0) for s in steps]  # the loader skipped one batch at step 150
    with open_store(store_url) as store:
        store.ensure_run("imported", config={"lr": 3e-4})
        store.write_metrics("imported", pd.DataFrame({"step": steps, "key": DATA_CURSOR, "value": cursor}))
        store.save_state(state_name("imported"), {"judged": "with other facts"})
        before = store.load_run("imported")
    (why,) = DataInvariants().not_judged(before)
    assert why.needs == "the global batch size: gapwatch runs set imported --global-batch-size N"
    assert DataInvariants().detect(before) == []

    assert main(["runs", "set", "imported", "--global-batch-size", "8", "--tokens-per-step", "16384",
                 "--store", store_url]) == 0
    assert capsys.readouterr().out.strip() == "imported: global_batch_size 8, tokens_per_step 16,384"
    with open_store(store_url) as store:
        after = store.load_run("imported")
        assert store.load_state(state_name("imported")) is None  # the watch service starts again
        assert store.get_run("imported")["config"] == {"lr": 3e-4, "global_batch_size": 8}
    assert (after.info.global_batch_size, after.info.tokens_per_step) == (8, 16384)
    assert DataInvariants().not_judged(after) == []
    assert [d.start_step for d in DataInvariants().detect(after)] == [150]
    capsys.readouterr()
    assert main(["runs", "set", "imported", "--store", store_url]) == 2
    assert "give at least one of --global-batch-size" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["runs", "set", "imported", "--global-batch-size", "0", "--store", store_url])
    assert "must be positive, not 0" in capsys.readouterr().err


def test_a_log_without_times_has_no_last_metric_time_and_one_with_times_keeps_its_own(sqlite_url, tmp_path, capsys):
    untimed, timed = tmp_path / "untimed.csv", tmp_path / "timed.csv"
    untimed.write_text("step,train/loss\n1,3.0\n2,2.9\n")
    timed.write_text("step,train/loss,timestamp\n1,3.0,1700000000\n2,2.9,1700000060\n")
    for path in (untimed, timed):
        assert main(["import", str(path), "--store", sqlite_url]) == 0
    capsys.readouterr()
    assert main(["runs", "--json", "--store", sqlite_url]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    # Imported now, logged at a time the file does not say: no time, rather than the import's.
    assert rows["untimed"]["last_wall_time"] is None and rows["timed"]["last_wall_time"] == 1700000060
    assert main(["runs", "--store", sqlite_url]) == 0
    lines = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines["untimed"][6] == "-" and lines["timed"][6].endswith("years ago")
