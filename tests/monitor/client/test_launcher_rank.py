"""In a torch.distributed job every rank runs the same script, and so constructs the same Monitor:
rank 0 logs the run, the others log nothing (a run logged by every rank would read as one restart
per rank), unless the ranks agree on an attempt to log their own metrics into one run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from monitor.client import Monitor, MonitorSettings, NullMonitor
from monitor.client.monitor import launcher_rank
from monitor.store import open_store


def test_only_rank_zero_of_a_distributed_job_logs(sqlite_url, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    quiet = Monitor("r", sqlite_url, settings=MonitorSettings(spool_dir=tmp_path))
    assert isinstance(quiet, NullMonitor) and quiet.run == "r"
    quiet.log(1, {"train/loss": 2.0})
    quiet.close()
    with open_store(sqlite_url) as store:
        assert store.get_run("r") is None  # it never touched the store
    # Ranks that agree on the attempt log their own rows into one run.
    with Monitor("r", sqlite_url, attempt=1, settings=MonitorSettings(spool_dir=tmp_path)) as host:
        host.log(1, {"perf/tokens_per_s": 5.0})
    monkeypatch.setenv("RANK", "0")
    with Monitor("r", sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as first:
        assert not isinstance(first, NullMonitor)
        first.log(1, {"train/loss": 2.0})
    with open_store(sqlite_url) as store:
        assert set(store.list_keys("r")) == {"perf/tokens_per_s", "train/loss"}


@pytest.mark.parametrize(("env", "rank"), [({}, 0), ({"RANK": "3"}, 0), ({"RANK": "3", "WORLD_SIZE": "1"}, 0),
                                           ({"RANK": "3", "WORLD_SIZE": "8"}, 3),
                                           ({"RANK": "x", "WORLD_SIZE": "8"}, 0)])
def test_the_rank_is_the_launchers_and_only_in_a_job_of_several(env, rank, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launcher_rank() == rank


def test_a_script_run_by_torchrun_on_two_processes_is_one_run_of_one_attempt(sqlite_url, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import torch.distributed as dist
        from monitor.client import Monitor, MonitorSettings

        dist.init_process_group("gloo")
        with Monitor("ddp", {sqlite_url!r}, settings=MonitorSettings(spool_dir={str(tmp_path)!r})) as monitor:
            for step in range(1, 11):
                monitor.log(step, {{"train/loss": 3.0 - step / 10}})
            dist.barrier()
        dist.destroy_process_group()
    """))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    with open_store(sqlite_url) as store:
        run = store.load_run("ddp")
        assert list(run.series("train/loss").index) == list(range(1, 11))
        assert store.get_run("ddp")["attempts"] == 1  # not one attempt per rank
