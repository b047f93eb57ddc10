"""What log() refuses at the door, and what the writer does with a batch the store refuses."""

from __future__ import annotations

import json
import logging
import math
import os

import numpy as np
import pytest

from monitor.client import InvalidLogError, Monitor, MonitorSettings
from monitor.store import open_store


@pytest.mark.parametrize("store_url", ["sqlite", "postgresql"], indirect=True)
def test_a_bad_key_and_a_nan_step_raise_at_log_and_later_steps_are_stored(store_url, tmp_path):
    with Monitor("r", store=store_url, settings=MonitorSettings(spool_dir=tmp_path, flush_interval_s=0.1)) as mon:
        for step in range(100):
            mon.log(step, {"train/loss": 1.0})
        with pytest.raises(InvalidLogError, match=r"metric key 'Train Loss' is not of the form namespace/name"):
            mon.log(100, {"Train Loss": 1.0, "train/loss": 1.0})
        with pytest.raises(InvalidLogError, match=r"step nan is not finite"):
            mon.log(math.nan, {"train/loss": 1.0})
        for step in range(100, 300):
            mon.log(step, {"train/loss": 2.0})
        assert mon.flush()
    with open_store(store_url) as store:
        assert store.load_run("r").scalars.index.tolist() == list(range(300))
    assert not list((tmp_path / "r").glob("*.jsonl")), "nothing waits in the spool"


@pytest.mark.parametrize("step, message", [
    (1.5, "step 1.5 is not an integer"),
    (-1, "step -1 is negative"),
    (math.inf, "step inf is not finite"),
    (True, "step True is a bool"),
    ("7", "step '7' is not an integer"),
    (2**63, "is beyond the largest step"),
])
def test_each_bad_step_has_its_message(sqlite_url, tmp_path, step, message):
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        with pytest.raises(InvalidLogError, match=message):
            mon.log(step, {"train/loss": 1.0})
        with pytest.raises(InvalidLogError, match=message):
            mon.event("checkpoint", step)
        mon.log(np.int64(3), {"train/loss": 1.0})
        mon.log(4.0, {"train/loss": 1.0})


def test_a_series_never_goes_back_but_other_series_may(sqlite_url, tmp_path):
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        mon.log(10, {"train/loss": 1.0})
        mon.log(10, {"train/grad_norm": 1.0})
        mon.log(5, {"eval/heldout/c4/loss": 3.0})  # an evaluation logged late, at its checkpoint
        with pytest.raises(InvalidLogError, match=r"step 9 of 'train/loss' comes after step 10"):
            mon.log(9, {"train/loss": 1.0})


def test_warn_mode_drops_the_bad_values_keeps_the_rest_and_says_so_once(sqlite_url, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gapwatch.client")
    settings = MonitorSettings(spool_dir=tmp_path, on_invalid="warn")
    with Monitor("r", store=sqlite_url, settings=settings) as mon:
        for step in range(5):
            mon.log(step, {"Train Loss": 1.0, "train/loss": float(step)})
        mon.log(math.nan, {"train/loss": 1.0})
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 2 and "'Train Loss'" in warnings[0] and "step nan" in warnings[1]
    with open_store(sqlite_url) as store:
        data = store.load_run("r")
        assert data.scalars["train/loss"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert store.list_keys("r") == ["train/loss"]


def test_a_batch_the_store_refuses_is_quarantined_and_does_not_block_the_rest(sqlite_url, tmp_path, caplog):
    """A spool left by an older client with a bad key in it (issue 16's poisoned spool)."""
    caplog.set_level(logging.WARNING, logger="gapwatch.client")
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    dead_pid = 2**22 + 12345  # above pid_max's default: no such process
    lines = [
        {"attempt": None, "metrics": [[0, "train/loss", 1.0, 0.0]], "events": []},
        {"attempt": None, "metrics": [[1, "Train Loss", 1.0, 0.0]], "events": []},
        {"attempt": None, "metrics": [[2, "train/loss", 1.0, 0.0]], "events": []},
    ]
    (run_dir / f"{dead_pid}-old.jsonl").write_text("".join(json.dumps(b) + "\n" for b in lines))
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        mon.log(3, {"train/loss": 2.0})
    with open_store(sqlite_url) as store:
        assert store.load_run("r").scalars.index.tolist() == [0, 2, 3]
    quarantined = list((run_dir / "quarantine").glob("*.jsonl"))
    assert len(quarantined) == 1
    kept = [json.loads(line) for line in quarantined[0].read_text().splitlines()]
    assert [b["batch"]["metrics"][0][1] for b in kept] == ["Train Loss"]
    warning = next(r.getMessage() for r in caplog.records if "refused" in r.getMessage())
    assert str(quarantined[0]) in warning and "steps 1..1" in warning
    assert not list(run_dir.glob("*.jsonl")), "the spool is empty; the bad batch waits in quarantine only"
    assert os.path.exists(quarantined[0])


def test_a_blank_run_name_is_refused_at_once(sqlite_url, tmp_path):
    with pytest.raises(InvalidLogError, match=r"run name '   ' must have 1 to 255 characters, not all blank"):
        Monitor("   ", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path))
