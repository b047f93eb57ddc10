"""What the watch service derives (spike scores) is stored apart from what the run logged: after
watching, the run's rows and its export are exactly what was logged, and the score is still
readable for the dashboard."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.alerting.config import AlertingConfig
from monitor.judging.engine import DetectConfig
from monitor.importers.run_export import export_run
from monitor.schema import SPIKE_SCORE_LOSS, TRAIN_LOSS
from monitor.store import derived, open_store
from monitor.watch.config import WatchConfig
from monitor.watch.service import TargetSpec, WatchService

STEPS = 3000
SPIKES = (1200, 2100)


def spiky_loss() -> np.ndarray:
    steps = np.arange(STEPS)
    loss = 2.5 + 3.0 * np.exp(-steps / 500) + 0.01 * np.random.default_rng(3).standard_normal(STEPS)
    loss[list(SPIKES)] += 2.0
    return loss


def test_after_watch_the_run_holds_only_what_was_logged(store_url, tmp_path):
    with open_store(store_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", pd.DataFrame({"step": np.arange(STEPS), "key": TRAIN_LOSS, "value": spiky_loss()}))
        config = WatchConfig(poll_interval_s=0.05, alerting=AlertingConfig(sinks=[]),
                             detect=DetectConfig(detectors=["spike"]))
        svc = WatchService(store, config, TargetSpec(runs=("r",)), sinks={})
        svc.poll()
        assert {d.start_step for d in store.read_detections("r")} >= set(SPIKES), "the spikes were judged"

        assert store.count_rows("r") == STEPS, "the run's rows are what was logged"
        assert store.list_keys("r") == [TRAIN_LOSS]
        score = store.read_derived("r", [SPIKE_SCORE_LOSS])
        assert len(score) and score["value"].max() > 0, "the spike score is kept, apart"
        assert len(store.read_derived("r", max_points=3)) <= 3 * len(set(score["key"]))
        written = export_run(store, "r", tmp_path / "r.jsonl")
        exported = pd.read_json(tmp_path / "r.jsonl", lines=True)
        assert written == STEPS and set(exported["key"]) == {TRAIN_LOSS}


def test_derived_rows_an_older_store_kept_among_the_logged_ones_are_moved(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", pd.DataFrame({"step": np.arange(100), "key": TRAIN_LOSS, "value": 2.0}))
        store.write_metrics("r", pd.DataFrame({"step": [10, 50], "key": SPIKE_SCORE_LOSS, "value": [0.0, 0.002]}))
        assert store.count_rows("r") == 102
        with store.atomic() as conn:
            derived.move_logged(conn)  # what migration 4 does to such a store
        assert store.count_rows("r") == 100 and store.list_keys("r") == [TRAIN_LOSS]
        moved = store.read_derived("r")
        assert moved["step"].tolist() == [10, 50] and moved["value"].tolist() == [0.0, 0.002]
