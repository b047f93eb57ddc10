"""A trainer that logs as fast as it can (per-layer statistics, 10 metrics a step, no pause):
the store is slower than the loop, and that is backpressure, not an outage. Every row is in the
store when close() returns, nothing is left in the spool, and nobody is told the store is gone."""

from __future__ import annotations

import logging
import time

import pytest

from monitor.client import Monitor, MonitorSettings
from monitor.store import open_store

KEYS = [f"layers/l{i}_grad_norm" for i in range(10)]
SECONDS = 0.5  # flat out: several times what the store takes in that time, so a backlog builds


@pytest.fixture(autouse=True)
def small_chunks():
    """The store's own chunk width, not the tests' 64 steps: a flat-out writer of 10 series at
    tens of thousands of steps a second would seal a 64-step chunk per series hundreds of times a
    second, which measures the test setting rather than the writer a trainer gets."""


@pytest.mark.slow
def test_a_flat_out_writer_stores_every_row_by_close(store_url, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gapwatch.client")
    # Deadlines with room for a two-core machine shared with other jobs, where one write of the
    # backlog can take many times its planned second: what is asserted is that a store that keeps
    # answering is never called unreachable and gets every row by close().
    settings = MonitorSettings(spool_dir=tmp_path, handle_sigterm=False, write_timeout_s=10.0, close_timeout_s=60.0)
    mon = Monitor("flat", store=store_url, settings=settings)
    step = 0
    stop = time.monotonic() + SECONDS
    while time.monotonic() < stop:
        mon.log(step, {k: step * 0.5 for k in KEYS})
        step += 1
    mon.close()

    with open_store(store_url) as store:
        assert store.count_rows("flat") == step * len(KEYS), "every row stored, none twice"
        scalars = store.load_run("flat").scalars
        assert scalars.index.tolist() == list(range(step))
        assert scalars[KEYS[3]].iloc[-1] == (step - 1) * 0.5
    assert not list((tmp_path / "flat").glob("*.jsonl")), "nothing left in the spool"
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "unreachable" in m or "still busy" in m], messages


def test_a_replay_larger_than_one_write_is_written_in_bounded_parts(sqlite_url, tmp_path, monkeypatch):
    """A spool of one huge batch (an older client's) is replayed over several writes, each
    carrying on where the last stopped: no write is ever asked to take the whole."""
    import json

    import monitor.client.monitor as client
    import monitor.client.store_jobs as jobs

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    dead_pid = 2**22 + 4321  # above pid_max's default: no such process
    rows = [[s, k, float(s), 0.0] for s in range(10_000) for k in KEYS]
    (run_dir / f"{dead_pid}-old.jsonl").write_text(json.dumps({"attempt": None, "metrics": rows, "events": []}) + "\n")
    sizes = []
    real = jobs.write_batch

    def counted(store, run, batch, attempt, progress):
        sizes.append(len(batch["metrics"]))
        return real(store, run, batch, attempt, progress)

    monkeypatch.setattr(jobs, "write_batch", counted)
    monkeypatch.setattr(client, "MAX_BATCH_ROWS", 10_000)
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path, handle_sigterm=False)) as mon:
        mon.log(10_000, {KEYS[0]: 1.0})
        with open_store(sqlite_url) as store:
            waited = time.monotonic() + 120
            while store.count_rows("r") < len(rows) and time.monotonic() < waited:
                time.sleep(0.2)
    with open_store(sqlite_url) as store:
        assert store.count_rows("r") == len(rows) + 1
    assert max(sizes) <= 10_000 and sum(sizes[:-1]) >= len(rows), sizes
    assert not list(run_dir.glob("*.jsonl"))


@pytest.mark.parametrize("closing", [False, True])
def test_a_write_longer_than_the_deadline_that_keeps_answering_is_waited_for(sqlite_url, tmp_path, caplog,
                                                                          monkeypatch, closing):
    """A store that answers part after part of a write is slow, not gone: the writer waits for the
    whole write though it lasts several times write_timeout_s, while logging and while closing,
    leaves nothing in the spool and never says the store is unreachable."""
    import monitor.client.store_jobs as jobs

    real = jobs.write_batch
    slow = {"writes": 1}

    def answering_slowly(store, run, batch, attempt, progress):
        if slow["writes"]:
            slow["writes"] -= 1
            for _ in range(25):  # 2.5 s in all, an answer every 0.1 s
                time.sleep(0.1)
                progress()
        return real(store, run, batch, attempt, progress)

    caplog.set_level(logging.WARNING, logger="gapwatch.client")
    settings = MonitorSettings(spool_dir=tmp_path, handle_sigterm=False, flush_interval_s=0.2, write_timeout_s=1.0,
                               close_timeout_s=1.0)
    mon = Monitor("slow", store=sqlite_url, settings=settings)
    monkeypatch.setattr(jobs, "write_batch", answering_slowly)
    for step in range(100):
        mon.log(step, {KEYS[0]: 1.0})
    if not closing:
        time.sleep(1.5)  # the next tick hands the batch to a job, which is still writing past write_timeout_s
    mon.close()
    with open_store(sqlite_url) as store:
        assert store.count_rows("slow") == 100
    assert slow["writes"] == 0, "the slow write happened"
    assert not list((tmp_path / "slow").glob("*.jsonl")), "nothing left in the spool"
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "unreachable" in m or "still busy" in m], messages
