"""What a poll costs follows what it must judge: runs with nothing new cost no query of their own,
a series no configured detector reads is never read, and a reference many runs share is read once."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pandas as pd
from sqlalchemy import event

from monitor.alerting.config import AlertingConfig
from monitor.judging.engine import DetectConfig
from monitor.store import open_store
from monitor.watch.config import WatchConfig
from monitor.watch.service import TargetSpec, WatchService

KEYS = ["train/loss", "layers/l0_grad_norm"]


def rows(lo: int, hi: int) -> pd.DataFrame:
    steps = np.arange(lo, hi)
    return pd.DataFrame({"step": np.repeat(steps, len(KEYS)), "key": KEYS * len(steps), "value": 2.0})


def service(store, detectors: list[str]) -> WatchService:
    config = WatchConfig(alerting=AlertingConfig(sinks=[]), detect=DetectConfig(detectors=detectors))
    return WatchService(store, config, TargetSpec(all_runs=True), sinks={})


def statements_of_one_poll(store, svc: WatchService) -> int:
    seen = []
    listener = lambda *args: seen.append(args[2])  # noqa: E731 - (conn, cursor, statement, ...)
    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        svc.poll()
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    return len(seen)


def test_runs_with_nothing_new_cost_no_query_of_their_own(store_url):
    with open_store(store_url) as store:
        costs = {}
        for n_runs in (2, 12):
            for i in range(n_runs):
                store.ensure_run(f"{n_runs}-r{i}")
                store.write_metrics(f"{n_runs}-r{i}", rows(0, 100))
            svc = service(store, ["nonfinite"])
            svc.poll()  # judges every run once
            costs[n_runs] = statements_of_one_poll(store, svc)
        assert costs[12] == costs[2], "an idle poll's queries do not grow with the runs"


def test_a_series_no_detector_reads_is_never_read(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", rows(0, 200))
        svc = service(store, ["spike"])  # reads train/loss and grad norms, not per-layer ones
        svc.poll()
        [watcher] = svc.watchers.values()
        assert set(watcher.cursor.key_last) == {"train/loss"}
        store.write_metrics("r", rows(200, 210))
        svc.poll()
        assert watcher.cursor.key_last == {"train/loss": 209}

        everything = service(store, ["nonfinite"])  # reads every series
        everything.poll()
        [watcher] = everything.watchers.values()
        assert set(watcher.cursor.key_last) == set(KEYS)


def test_runs_judged_against_one_reference_read_it_once_and_share_it(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("baseline")
        store.write_metrics("baseline", rows(0, 300))
        runs = [f"r{i}" for i in range(4)]
        for run in runs:
            store.ensure_run(run, reference="baseline")
            store.write_metrics(run, rows(0, 200))
        reads = []
        load_run = store.load_run
        store.load_run = lambda name, *args, **kwargs: reads.append(name) or load_run(name, *args, **kwargs)
        config = WatchConfig(alerting=AlertingConfig(sinks=[]), detect=DetectConfig(detectors=["reference_divergence"]))
        svc = WatchService(store, config, TargetSpec(runs=tuple(runs)), sinks={})
        svc.poll()
        held = {id(w._prepared) for w in svc.watchers.values()}
        assert reads.count("baseline") == 1 and len(held) == 1 and len(svc.watchers) == 4
        # The reference grows (a live one): read once more, shared again, and the old version is gone
        # with the last watcher that held it.
        old = weakref.ref(next(iter(svc.watchers.values()))._prepared)
        store.write_metrics("baseline", rows(300, 400))
        for run in runs:
            store.write_metrics(run, rows(200, 250))
        svc.poll()
        assert reads.count("baseline") == 2
        assert len({id(w._prepared) for w in svc.watchers.values()}) == 1
        gc.collect()
        assert old() is None
