"""`gapwatch watch` on the command line: one clear line for mistakes, a console alert with --once."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from monitor.store import open_store

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def store_with_nan(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        steps = np.arange(200)
        store.write_metrics("r", pd.DataFrame({"step": steps, "key": "train/loss",
                                               "value": np.where(steps == 150, np.nan, 2.0)}))
    return sqlite_url


@pytest.mark.parametrize("argv, message", [
    (["--all", "--reference", "b"], "--reference goes with --run"),
    (["--run", "nope"], "no run named 'nope'"),
    (["--run", "r", "--reference", "typo"], "reference run 'typo' of 'r' is not in"),
    (["--run", "r", "--detectors", "nonfinite,psychic"], "unknown detector(s) psychic"),
    (["--run", "r", "--poll-interval", "0"], "--poll-interval must be positive"),
    (["--run", "r", "--config", "{bad_params}"], "detector settings: unknown parameter 'sensitivity' of detector "
                                                 "spike; its parameters: metrics, "),
    (["--run", "r", "--reference", "r"], "run 'r' cannot be its own reference"),
    (["--run", "r", "--config", "/nonexistent/watch.yaml"], "cannot read watch config"),
])
def test_mistakes_end_in_one_line(store_with_nan, capsys, tmp_path, argv, message):
    bad_params = tmp_path / "watch.yaml"
    bad_params.write_text("detector_params: {spike: {sensitivity: 11}}")
    argv = [a.replace("{bad_params}", str(bad_params)) for a in argv]
    assert main(["watch", "--store", store_with_nan, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gapwatch watch: error: ") and message in err and err.count("\n") == 1


def test_once_prints_the_alert_on_the_console_and_exits(store_with_nan, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SLACK_WEBHOOK_URL"}
    out = subprocess.run([sys.executable, "-m", "app", "watch", "--run", "r", "--store", store_with_nan, "--once",
                          "--detectors", "nonfinite"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    [line] = [x for x in out.stdout.splitlines() if "alert #" in x]
    assert line.startswith("CRITICAL") and "NaN or Inf in the run on r train/loss steps 150-150" in line
    assert "/run/r?start=150&end=150" in line
    assert "sinks: console: console, severity >= info" in out.stderr
    # A stored reference not imported yet: watched alone, and the first line says so.
    with open_store(store_with_nan) as store:
        store.ensure_run("early", reference="imported-later")
        store.write_metrics("early", pd.DataFrame({"step": [1, 2], "key": "train/loss", "value": [2.0, np.nan]}))
    out = subprocess.run([sys.executable, "-m", "app", "watch", "--run", "early", "--store", store_with_nan, "--once",
                          "--detectors", "nonfinite"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "watching early (reference: imported-later, not in the store yet)" in out.stderr
    assert "NaN or Inf in the run on early" in out.stdout
    with open_store(store_with_nan) as store:
        assert store.load_state("watch/r")["cursor"]["key_last"] == {"train/loss": 199}
        assert len(store.read_detections("r")) == 1


def test_once_sends_a_burst_beyond_the_console_rate_limit_at_once(sqlite_url, tmp_path):
    """More notifications than the console's burst, at a rate that would take minutes: the console
    is one's own terminal, so --once prints them all instead of leaving them in the outbox."""
    with open_store(sqlite_url) as store:
        steps = np.arange(200)
        for i in range(4):
            store.ensure_run(f"r{i}")
            store.write_metrics(f"r{i}", pd.DataFrame({"step": steps, "key": "train/loss",
                                                       "value": np.where(steps == 50, np.nan, 2.0)}))
    config = tmp_path / "watch.yaml"
    config.write_text("sinks: [{name: console, kind: console, burst: 2, rate_per_minute: 1}]")
    env = {k: v for k, v in os.environ.items() if k != "SLACK_WEBHOOK_URL"}
    out = subprocess.run([sys.executable, "-m", "app", "watch", "--all", "--store", sqlite_url, "--once",
                          "--config", str(config), "--detectors", "nonfinite"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stdout.splitlines() if "alert #" in x]
    assert sum(x.startswith("CRITICAL") for x in lines) == 4 and sum(x.startswith("RESOLVED") for x in lines) == 4
    assert "wait in the outbox" not in out.stderr


def _nan_run(store, name, status=None):
    steps = np.arange(200)
    store.ensure_run(name, **({"status": status} if status else {}))
    store.write_metrics(name, pd.DataFrame({"step": steps, "key": "train/loss",
                                            "value": np.where(steps == 150, np.nan, 2.0)}))


def test_once_delivers_only_its_own_runs_notifications(sqlite_url, capsys):
    with open_store(sqlite_url) as store:
        _nan_run(store, "mine")
        _nan_run(store, "someone-elses")
    # Another watch queued notifications for its run and never delivered them (its sink is gone).
    assert main(["watch", "--run", "someone-elses", "--store", sqlite_url, "--once", "--detectors", "nonfinite",
                 "--config", _config_without_sinks(sqlite_url)]) == 0
    with open_store(sqlite_url) as store:
        assert store.outbox.pending_count(["someone-elses"]) == 1
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE alert_outbox SET next_try_at = 0")  # its retry is due now
    capsys.readouterr()
    assert main(["watch", "--run", "mine", "--store", sqlite_url, "--once", "--detectors", "nonfinite"]) == 0
    printed = [x for x in capsys.readouterr().out.splitlines() if "alert #" in x]
    assert len(printed) == 1 and " on mine " in printed[0]
    with open_store(sqlite_url) as store:
        assert store.outbox.pending_count(["mine"]) == 0 and store.outbox.pending_count(["someone-elses"]) == 1


def _config_without_sinks(sqlite_url):
    """A watch config whose sink "console" is a webhook that refuses connections (nothing listens
    on port 9 of loopback): its notifications stay queued for a sink of that name, which a later
    watch with the default console sink would print, were they its runs'."""
    path = sqlite_url.removeprefix("sqlite:///") + ".watch.yaml"
    with open(path, "w") as f:
        f.write("sinks: [{name: console, kind: webhook, url: 'http://127.0.0.1:9/hook'}]\n")
    return path


def test_once_json_and_fail_on_gate_a_ci_job(store_with_nan, capsys):
    argv = ["watch", "--run", "r", "--store", store_with_nan, "--once", "--detectors", "nonfinite", "--json"]
    assert main([*argv, "--fail-on", "critical"]) == 1
    captured = capsys.readouterr()
    (alert,) = json.loads(captured.out)  # stdout holds the JSON alone
    assert (alert["run"], alert["detector"], alert["severity"], alert["start_step"]) == ("r", "nonfinite", "critical", 150)
    assert "alert #" in captured.err  # the console sink printed to stderr
    # A second pass finds nothing new, and the open alert still fails the gate.
    assert main([*argv, "--fail-on", "warning"]) == 1
    capsys.readouterr()


def test_once_on_a_clean_run_exits_0_with_fail_on(sqlite_url, capsys):
    with open_store(sqlite_url) as store:
        store.ensure_run("clean")
        store.write_metrics("clean", pd.DataFrame({"step": np.arange(200), "key": "train/loss", "value": 2.0}))
    assert main(["watch", "--run", "clean", "--store", sqlite_url, "--once", "--json", "--fail-on", "warning"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_once_fails_naming_a_run_that_could_not_be_judged(store_with_nan, capsys, monkeypatch):
    """A pass that crashes leaves the run's verdict unknown: --once must not exit 0 (nor 1, which
    says a finding reached --fail-on), and says which run failed and why in one line."""
    from app.commands.watch import NOT_JUDGED_EXIT
    from monitor.judging.engine import DetectionEngine

    def crash(*_args, **_kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(DetectionEngine, "update", crash)
    for gate in ([], ["--fail-on", "warning"]):
        assert main(["watch", "--run", "r", "--store", store_with_nan, "--once", *gate]) == NOT_JUDGED_EXIT == 3
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last == "gapwatch watch: error: could not judge run 'r': RuntimeError: boom"


def test_json_and_fail_on_need_once(store_with_nan, capsys):
    for flag in (["--json"], ["--fail-on", "critical"]):
        assert main(["watch", "--run", "r", "--store", store_with_nan, *flag]) == 2
        assert "goes with --once" in capsys.readouterr().err


def test_all_covers_imported_runs_without_a_reference(sqlite_url, capsys):
    with open_store(sqlite_url) as store:
        _nan_run(store, "imported-alone", status="imported")
    assert main(["watch", "--all", "--store", sqlite_url, "--once", "--detectors", "nonfinite", "--json"]) == 0
    (alert,) = json.loads(capsys.readouterr().out)
    assert alert["run"] == "imported-alone" and alert["detector"] == "nonfinite"
