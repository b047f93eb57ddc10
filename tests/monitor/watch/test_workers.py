"""Several watch workers on one PostgreSQL store: each run judged by one worker at a time, a dead
worker's runs taken over within one lease, each notification sent once; SQLite takes one worker."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from monitor.alerting.sinks import build_sinks
from monitor.judging.engine import DetectConfig
from monitor.store import LeaseLost, open_store
from monitor.watch.config import WatchConfig
from monitor.watch.service import TargetSpec, WatchService
from tests.monitor.alerting.helpers import slack_config
from tests.monitor.alerting.receiver import Receiver

REPO = Path(__file__).resolve().parents[3]
RUNS = ("r0", "r1", "r2", "r3")
LEASE_S = 2.0
WAIT_S = 60.0


def log_steps(store, run: str, lo: int, hi: int, nan: tuple[int, int] | None = None) -> None:
    steps = np.arange(lo, hi)
    values = np.full(len(steps), 2.0)
    if nan is not None:
        values[(steps >= nan[0]) & (steps < nan[1])] = np.nan
    store.write_metrics(run, pd.DataFrame({"step": steps, "key": "train/loss", "value": values}))


def worker(url: str, receiver, name: str) -> WatchService:
    """A worker with a store and engines of its own, as another host would have."""
    config = WatchConfig(poll_interval_s=0.05, lease_s=LEASE_S, alerting=slack_config(receiver.url()),
                         detect=DetectConfig(detectors=["nonfinite"]))
    return WatchService(open_store(url), config, TargetSpec(all_runs=True), sinks=build_sinks(config.alerting),
                        worker=name)


def wait_until(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def pg_runs(pg_url):
    with open_store(pg_url) as store:
        for run in RUNS:
            store.ensure_run(run)
            log_steps(store, run, 0, 300, nan=(100, 110))
    return pg_url


def test_two_workers_share_the_runs_and_one_takes_over_when_the_other_dies(pg_runs, receiver):
    a, b = worker(pg_runs, receiver, "a"), worker(pg_runs, receiver, "b")
    try:
        for _ in range(3):  # a takes every run, b starts, a gives back what is beyond its share
            a.poll()
            b.poll()
        assert a._held and b._held and not a._held & b._held and a._held | b._held == set(RUNS)
        for svc in (a, b):
            svc.outbox.deliver_due()
        opened = [r for r in receiver.deliveries()]
        assert len(opened) == len(RUNS) * 2, "one opened and one resolved per run"

        # a dies (no more polls, no release); new faults on every run.
        with open_store(pg_runs) as store:
            for run in RUNS:
                log_steps(store, run, 300, 2000, nan=(1500, 1510))
        died = time.monotonic()
        wait_until(lambda: b.poll() is not None and b._held == set(RUNS), "b holding every run")
        took_over = time.monotonic() - died
        assert took_over <= LEASE_S + 1.0, f"taken over after {took_over:.1f} s"
        b.poll()
        b.outbox.deliver_due()

        # a comes back from a pause: what it would record for a run b holds is refused.
        watcher = next(iter(a.watchers.values()))
        with pytest.raises(LeaseLost):
            a.ledger.record([], state=watcher.state(), fence=a._fence(watcher.run))
    finally:
        for svc in (a, b):
            svc.store.close()
    keys = Counter(r.key for r in receiver.deliveries())
    assert len(keys) == len(RUNS) * 4 and set(keys.values()) == {1}, "each notification once"


def test_sqlite_takes_one_worker_and_says_so(sqlite_url, receiver, caplog):
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        log_steps(store, "r", 0, 300, nan=(100, 110))
    a, b = worker(sqlite_url, receiver, "a"), worker(sqlite_url, receiver, "b")
    try:
        a.poll()
        with caplog.at_level(logging.WARNING, logger="gapwatch.watch"):
            b.poll()
        assert a._held == {"r"} and b._held == set()
        assert "a SQLite store takes one watch worker" in caplog.text and "watch worker a " in caplog.text
        a.release()  # a stops cleanly: b takes over at its next poll
        b.poll()
        assert b._held == {"r"}
    finally:
        for svc in (a, b):
            svc.store.close()


CONFIG = f"""
poll_interval_s: 0.2
lease_s: {LEASE_S}
incidents: {{resolve_after_steps: 10, cooldown_steps: 100}}
delivery: {{timeout_s: 0.5, backoff_base_s: 0.1, backoff_max_s: 0.5, claim_lease_s: 2.0}}
sinks:
  - {{name: slack, kind: slack, min_severity: info}}
"""


def start_worker(tmp: Path, url: str, hook: str, n: int) -> subprocess.Popen:
    env = {**os.environ, "SLACK_WEBHOOK_URL": hook, "PYTHONUNBUFFERED": "1"}
    with open(tmp / f"w{n}.out", "w") as out, open(tmp / f"w{n}.err", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "app", "watch", "--all", "--store", url, "--config",
                                 str(tmp / "watch.yaml"), "--detectors", "nonfinite"],
                                cwd=REPO, env=env, stdout=out, stderr=err)


def test_two_worker_processes_and_a_kill_9(pg_runs, receiver, tmp_path):
    (tmp_path / "watch.yaml").write_text(CONFIG)
    procs = [start_worker(tmp_path, pg_runs, receiver.url(), n) for n in (1, 2)]
    try:
        with open_store(pg_runs) as store:
            wait_until(lambda: len(receiver.deliveries()) >= len(RUNS) * 2, "every run's first incident told")

            def owners():
                return {name: owner for name, owner in store.leases.holders().items() if name.startswith("run/")}

            wait_until(lambda: len(set(owners().values())) == 2, "both workers holding runs")
            victim = procs[0]
            victim.send_signal(signal.SIGKILL)
            victim.wait(WAIT_S)
            killed = time.monotonic()
            for run in RUNS:
                log_steps(store, run, 300, 2000, nan=(1500, 1510))
            survivor = f":{procs[1].pid}"
            wait_until(lambda: len(owners()) == len(RUNS) and all(o.endswith(survivor) for o in owners().values()),
                       "the survivor holding every run")
            took_over = time.monotonic() - killed
            wait_until(lambda: len(receiver.deliveries()) >= len(RUNS) * 4, "every run's second incident told")
            time.sleep(1.0)  # a duplicate, if any were coming, would arrive now
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(WAIT_S)
    assert took_over <= LEASE_S + 2.0, f"taken over after {took_over:.1f} s"
    keys = Counter(r.key for r in receiver.deliveries())
    assert len(keys) == len(RUNS) * 4 and set(keys.values()) == {1}, "each notification once"
