"""The logging client: what it accepts, and that nothing accepted is lost."""

from __future__ import annotations

import inspect
import math
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from monitor.client import Monitor, MonitorSettings, NullMonitor
from monitor.store import open_store
from tests.monitor.client.private_postgres import PrivatePostgres


def test_accepts_floats_numpy_scalars_and_jax_arrays(sqlite_url, tmp_path):
    import jax.numpy as jnp

    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        mon.log(0, {"train/loss": 2.5, "train/grad_norm": np.float32(0.5), "train/tokens": np.int64(4096)})
        mon.log(1, {"train/loss": jnp.asarray(2.25), "train/grad_norm": jnp.float32(math.nan),
                    "optim/lr": math.inf})
        mon.event("checkpoint", 1, path="/ck/1", step_tokens=np.int64(8192))
    with open_store(sqlite_url) as store:
        data = store.load_run("r")
        assert data.scalars.loc[0, "train/loss"] == 2.5 and data.scalars.loc[1, "train/loss"] == 2.25
        assert data.scalars.loc[0, "train/tokens"] == 4096
        assert math.isnan(data.scalars.loc[1, "train/grad_norm"]) and data.scalars.loc[1, "optim/lr"] == math.inf
        assert data.events["payload"].iloc[0] == {"path": "/ck/1", "step_tokens": 8192}
        assert store.get_run("r")["status"] == "finished"


class DeviceValue:
    """Stands for a device array: records which thread turned it into a number, and when."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.fetched_on: str | None = None

    def __float__(self) -> float:
        self.fetched_on = threading.current_thread().name
        return self.value


def test_log_never_fetches_values_on_the_calling_thread(sqlite_url, tmp_path):
    values = [DeviceValue(float(step)) for step in range(20)]
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        for step, value in enumerate(values):
            mon.log(step, {"train/loss": value})
            assert value.fetched_on is None, "log() must not touch the value"
    assert {v.fetched_on for v in values} == {"gapwatch-writer-r"}
    with open_store(sqlite_url) as store:
        assert store.load_run("r").scalars["train/loss"].tolist() == [float(s) for s in range(20)]


def test_queued_calls_give_the_garbage_collector_nothing_to_follow(sqlite_url, tmp_path):
    """A collection on the training thread walks every tracked object: a queue of thousands of
    calls must add none (the slowest log() of a flat-out writer was such a collection)."""
    import gc

    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path, flush_interval_s=60.0)) as mon:
        gc.disable()  # no collection may untrack what log() queued
        try:
            for step in range(5_000):
                mon.log(step, {"train/loss": step * 0.5, "train/grad_norm": 1.0})
            queued = list(mon._queue)
        finally:
            gc.enable()
        assert queued, "the writer took every call before the queue was looked at"
        assert [type(x) for x in queued[:3]] == [int, dict, float]
        assert not [x for x in queued if gc.is_tracked(x)]
    with open_store(sqlite_url) as store:
        assert store.count_rows("r") == 10_000


def test_null_monitor_has_the_same_face():
    public = {n for n, v in inspect.getmembers(Monitor) if callable(v) and not n.startswith("_")}
    assert public <= {n for n in dir(NullMonitor)}
    with NullMonitor() as mon:
        mon.log(0, {"train/loss": 1.0})
        mon.event("checkpoint", 0)
        mon.flush()


def test_each_process_is_a_new_attempt(sqlite_url, tmp_path):
    settings = MonitorSettings(spool_dir=tmp_path)
    with Monitor("r", store=sqlite_url, settings=settings) as first:
        first.log(10, {"train/loss": 1.0})
    with Monitor("r", store=sqlite_url, settings=settings) as second:
        second.log(10, {"train/loss": 2.0})
    assert (first.attempt, second.attempt) == (1, 2)
    with open_store(sqlite_url) as store:
        data = store.load_run("r")
        assert data.scalars.loc[10, "train/loss"] == 2.0
        assert sorted(data.repeats["value"]) == [1.0, 2.0]


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from monitor.client import Monitor, MonitorSettings
    url, mode, spool = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    interval = 60.0 if mode == "sigterm" else 0.2
    mon = Monitor("child", store=url, settings=MonitorSettings(flush_interval_s=interval, spool_dir=spool))
    step = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        mon.log(step, {"train/loss": float(step), "train/grad_norm": 1.0})
        print(step, flush=True)
        step += 1
        time.sleep(0.002)
    """
)


def _run_child_then_signal(url, spool, mode, sig, after_steps):
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, mode, str(spool)], stdout=subprocess.PIPE, text=True)
    last = -1
    for line in child.stdout:
        last = int(line)
        if last >= after_steps:
            break
    child.send_signal(sig)
    rest = child.stdout.read().split()
    child.wait(timeout=60)
    return int(rest[-1]) if rest else last, child.returncode


def test_sigterm_flushes_everything(sqlite_url, tmp_path):
    last, code = _run_child_then_signal(sqlite_url, tmp_path, "sigterm", signal.SIGTERM, 500)
    assert code == 128 + signal.SIGTERM
    with open_store(sqlite_url) as store:
        data = store.load_run("child")
        assert data.scalars.index.max() == last and len(data.scalars) == last + 1
        assert store.get_run("child")["status"] == "crashed"


def test_sigkill_loses_at_most_about_one_flush_interval(sqlite_url, tmp_path):
    last, code = _run_child_then_signal(sqlite_url, tmp_path, "sigkill", signal.SIGKILL, 600)
    assert code == -signal.SIGKILL
    with open_store(sqlite_url) as store:
        steps = store.load_run("child").scalars.index
    assert list(steps) == list(range(len(steps))), "what was written has no holes"
    lost = last - steps.max()
    # 0.2 s of flush interval at <= 500 steps/s is <= 100 steps; allow for a loaded machine.
    print(f"logged up to {last}, stored up to {steps.max()}: lost {lost}")
    assert 0 <= lost <= 400


@pytest.fixture
def private_pg():
    pg = PrivatePostgres()
    pg.start()
    yield pg
    try:
        pg.stop()
    except subprocess.CalledProcessError:
        pass
    subprocess.run(["rm", "-rf", pg.dir], check=False)


def test_spool_and_replay_while_postgres_is_stopped_and_started(private_pg, tmp_path):
    settings = MonitorSettings(spool_dir=tmp_path, retry_interval_s=0.1)
    mon = Monitor("pg-run", store=private_pg.url, settings=settings)

    def log_steps(lo, hi):
        for step in range(lo, hi):
            mon.log(step, {"train/loss": step / 10, "train/grad_norm": 1.0})
        mon.flush()

    log_steps(0, 100)
    private_pg.stop()
    log_steps(100, 200)
    log_steps(200, 300)
    assert list((tmp_path / "pg-run").glob("*.jsonl")), "batches wait in the spool while the store is down"
    private_pg.start()
    time.sleep(0.2)
    log_steps(300, 400)
    mon.close()
    assert not list((tmp_path / "pg-run").glob("*.jsonl")), "the spool is emptied once replayed"
    with open_store(private_pg.url) as store:
        assert store.count_rows("pg-run") == 400 * 2, "every row exactly once"
        assert store.load_run("pg-run").scalars.index.tolist() == list(range(400))


def test_a_killed_processes_spool_is_replayed_by_the_next_one(sqlite_url, tmp_path):
    dead_url = "postgresql://postgres@127.0.0.1:1/none"
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from monitor.client import Monitor, MonitorSettings
        mon = Monitor("r", store=sys.argv[1], settings=MonitorSettings(spool_dir=Path(sys.argv[2])))
        for step in range(50):
            mon.log(step, {"train/loss": 1.0})
        mon.close()
        """
    )
    subprocess.run([sys.executable, "-c", script, dead_url, str(tmp_path)], check=True, timeout=120,
                   capture_output=True)
    assert len(list((tmp_path / "r").glob("*.jsonl"))) == 1
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        mon.log(50, {"train/loss": 2.0})
    assert mon.attempt == 2, "the dead process's rows were attempt 1"
    with open_store(sqlite_url) as store:
        data = store.load_run("r")
        assert data.scalars.index.tolist() == list(range(51))
    assert not list((tmp_path / "r").glob("*.jsonl"))
