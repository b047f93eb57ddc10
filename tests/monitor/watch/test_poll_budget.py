"""A run with a backlog is caught up over several polls and does not hold back the other runs: a
small run's fault is told in the same poll in which the big run's backlog is only begun."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.alerting.config import AlertingConfig
from monitor.judging.engine import DetectConfig
from monitor.store import open_store
from monitor.watch.config import WatchConfig
from monitor.watch.service import TargetSpec, WatchService

BACKLOG_STEPS = 20_000
WINDOW_STEPS = 1_000


def loss(steps: np.ndarray, nan: tuple[int, int] | None = None) -> pd.DataFrame:
    values = np.full(len(steps), 2.0)
    if nan is not None:
        values[(steps >= nan[0]) & (steps < nan[1])] = np.nan
    return pd.DataFrame({"step": steps, "key": "train/loss", "value": values})


def test_a_backlog_does_not_stop_a_small_runs_alert_in_the_same_poll(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("big")
        store.write_metrics("big", loss(np.arange(BACKLOG_STEPS)))
        store.ensure_run("small")
        store.write_metrics("small", loss(np.arange(200), nan=(100, 110)))
        # No time to spare: each run gets one pass of WINDOW_STEPS a poll.
        config = WatchConfig(catch_up_steps=WINDOW_STEPS, run_budget_s=0.0, alerting=AlertingConfig(sinks=[]),
                             detect=DetectConfig(detectors=["nonfinite"]))
        svc = WatchService(store, config, TargetSpec(all_runs=True), sinks={})

        svc.poll()
        [alert] = svc.ledger.alerts("small")
        assert alert.detector == "nonfinite" and alert.start_step == 100, "told in the first poll"
        big = next(w for t, w in svc.watchers.items() if t.run == "big")
        assert big.cursor.key_last["train/loss"] == WINDOW_STEPS - 1, "the backlog only begun"

        polls = 1
        while big.cursor.key_last["train/loss"] < BACKLOG_STEPS - 1:
            svc.poll()
            polls += 1
        assert polls == BACKLOG_STEPS // WINDOW_STEPS, "one window a poll until caught up"
        assert svc.ledger.alerts("big") == []


def test_once_judges_every_run_to_its_end(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("big")
        store.write_metrics("big", loss(np.arange(5_000), nan=(4_900, 4_910)))
        config = WatchConfig(catch_up_steps=WINDOW_STEPS, run_budget_s=0.0, alerting=AlertingConfig(sinks=[]),
                             detect=DetectConfig(detectors=["nonfinite"]))
        WatchService(store, config, TargetSpec(runs=("big",)), sinks={}).run(once=True)
        [alert] = WatchService(store, config, TargetSpec(runs=("big",)), sinks={}).ledger.alerts("big")
        assert alert.start_step == 4_900
