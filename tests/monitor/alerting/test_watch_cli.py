"""`gapwatch watch` on the command line: one clear line for mistakes, a console alert with --once."""

from __future__ import annotations

import os
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
    (["--run", "r", "--detectors", "nonfinite,psychic"], "unknown detector(s) psychic"),
    (["--run", "r", "--poll-interval", "0"], "--poll-interval must be positive"),
    (["--run", "r", "--config", "{bad_params}"], "detector settings: "),
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
    assert line.startswith("CRITICAL") and "nonfinite on r train/loss steps 150-150" in line
    assert "/run/r?start=150&end=150" in line
    assert "sinks: console: console, severity >= info" in out.stderr
    with open_store(store_with_nan) as store:
        assert store.load_state("watch/r")["cursor"]["key_last"] == {"train/loss": 199}
        assert len(store.read_detections("r")) == 1


def test_once_sends_a_burst_beyond_the_rate_limit_at_the_sinks_rate(sqlite_url, tmp_path):
    """More notifications than the console's burst: --once sends the rest at the sink's rate
    instead of leaving them in the outbox."""
    with open_store(sqlite_url) as store:
        steps = np.arange(200)
        for i in range(4):
            store.ensure_run(f"r{i}")
            store.write_metrics(f"r{i}", pd.DataFrame({"step": steps, "key": "train/loss",
                                                       "value": np.where(steps == 50, np.nan, 2.0)}))
    config = tmp_path / "watch.yaml"
    config.write_text("sinks: [{name: console, kind: console, burst: 2, rate_per_minute: 600}]")
    env = {k: v for k, v in os.environ.items() if k != "SLACK_WEBHOOK_URL"}
    out = subprocess.run([sys.executable, "-m", "app", "watch", "--all", "--store", sqlite_url, "--once",
                          "--config", str(config), "--detectors", "nonfinite"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stdout.splitlines() if "alert #" in x]
    assert sum(x.startswith("CRITICAL") for x in lines) == 4 and sum(x.startswith("RESOLVED") for x in lines) == 4
    assert "wait in the outbox" not in out.stderr
