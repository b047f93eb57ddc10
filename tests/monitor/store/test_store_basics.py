"""Runs, metrics, events and detections on both backends, for real."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from monitor.errors import GapwatchError
from monitor.schema import Detection, MetricRows, Severity
from monitor.store import open_store


def rows(steps, key="train/loss", values=None, attempt=None):
    steps = list(steps)
    frame = pd.DataFrame({"step": steps, "key": key, "value": values if values is not None else [float(s) for s in steps]})
    if attempt is not None:
        frame["attempt"] = attempt
    return frame


def test_run_fields_round_trip(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r", project="p", config={"global_batch_size": 32, "records_per_epoch": 1000},
                         tokens_per_step=4096.0, reference="ref")
        store.ensure_run("r", status="finished")  # an existing run keeps what it is not told
        run = store.get_run("r")
        assert run["project"] == "p" and run["reference"] == "ref" and run["status"] == "finished"
        info = store.run_info("r")
        assert (info.global_batch_size, info.records_per_epoch, info.tokens_per_step) == (32, 1000, 4096.0)
        assert store.get_run("nope") is None
        with pytest.raises(GapwatchError, match="no run named 'nope'"):
            store.run_info("nope")


def test_writes_are_idempotent(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", rows(range(500)))
        store.write_metrics("r", rows(range(500)))
        store.write_metrics("r", rows(range(250, 600)))
        assert store.count_rows("r") == 600
        series = store.read_scalars("r", ["train/loss"], max_points=10_000)
        assert series["step"].tolist() == list(range(600))
        data = store.load_run("r")
        assert len(data.scalars) == 600 and data.repeats.empty


def test_nan_and_inf_are_stored_as_such(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", rows([0, 1, 2, 3], values=[1.0, math.nan, math.inf, -math.inf]))
        got = store.read_scalars("r", ["train/loss"])["value"].tolist()
        assert got[0] == 1.0 and math.isnan(got[1]) and got[2] == math.inf and got[3] == -math.inf
        data = store.load_run("r")
        assert data.logged_nonfinite["step"].tolist() == [1, 2, 3]
        assert len(data.series("train/loss")) == 4


def test_a_later_attempt_wins_and_both_are_kept(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        assert store.new_attempt("r") == 1
        store.write_metrics("r", rows(range(100), values=[1.0] * 100, attempt=1))
        assert store.new_attempt("r") == 2
        store.write_metrics("r", rows(range(90, 150), values=[2.0] * 60, attempt=2))
        series = store.read_scalars("r", ["train/loss"], max_points=1000)
        by_step = dict(zip(series["step"], series["value"]))
        assert by_step[89] == 1.0 and by_step[90] == 2.0 and by_step[149] == 2.0
        data = store.load_run("r")
        assert sorted(set(data.repeats["step"])) == list(range(90, 100))
        assert set(data.repeats["attempt"]) == {1, 2}
        assert data.scalars.loc[95, "train/loss"] == 2.0


def test_bad_rows_reject_the_whole_batch_and_keep_what_was_accepted(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", rows(range(10)))
        with pytest.raises(GapwatchError, match="not a number"):
            store.write_metrics("r", pd.DataFrame({"step": [10, 11], "key": "train/loss", "value": [1.0, "abc"]}))
        with pytest.raises(GapwatchError, match="non-negative integer"):
            store.write_metrics("r", pd.DataFrame({"step": [12, -1], "key": "train/loss", "value": [1.0, 2.0]}))
        with pytest.raises(GapwatchError, match="lower snake case"):
            store.write_metrics("r", pd.DataFrame({"step": [12], "key": "Train Loss", "value": [1.0]}))
        with pytest.raises(GapwatchError, match="no run named"):
            store.write_metrics("ghost", rows(range(3)))
        assert store.count_rows("r") == 10


def metric_rows(steps, codes, names, values, attempt=1) -> MetricRows:
    n = len(steps)
    return MetricRows(np.asarray(steps, np.int64), np.asarray(codes, np.int32), names, np.asarray(values, float),
                      np.full(n, 1e9), np.full(n, attempt, np.int64))


def test_the_clients_arrays_are_stored_as_a_frame_of_them_is_and_checked_alike(store_url):
    with open_store(store_url) as store:
        for run in ("arrays", "frame"):
            store.ensure_run(run)
        # Two keys as codes, a name no row uses (a batch split off a larger one), a NaN, a repeat.
        names = ["train/loss", "train/grad_norm", "perf/mfu"]
        given = metric_rows([1, 1, 2, 2, 2], [0, 1, 0, 1, 0], names, [3.0, 1.0, 2.0, math.nan, 2.5])
        assert store.write_metrics("arrays", given) == 4
        store.write_metrics("frame", pd.DataFrame({"step": [1, 1, 2, 2, 2], "value": given.values,
                                                   "key": [names[c] for c in given.codes],
                                                   "wall_time": 1e9}))
        read = {run: store.read_scalars([run], names, max_points=100).drop(columns="run")
                .sort_values(["key", "step"]).reset_index(drop=True) for run in ("arrays", "frame")}
        pd.testing.assert_frame_equal(read["arrays"], read["frame"])
        assert read["arrays"]["value"].isna().sum() == 1 and 2.5 in set(read["arrays"]["value"]) and 2.0 not in set(read["arrays"]["value"])
        assert "perf/mfu" not in store.list_keys("arrays")
        with pytest.raises(GapwatchError, match="lower snake case"):
            store.write_metrics("arrays", metric_rows([3], [0], ["Train Loss"], [1.0]))
        with pytest.raises(GapwatchError, match="non-negative integer"):
            store.write_metrics("arrays", metric_rows([3, -1], [0, 0], names, [1.0, 1.0]))
        assert store.count_rows("arrays") == 4


def test_atomic_rolls_back_everything(store_url):
    with open_store(store_url) as store:
        with pytest.raises(RuntimeError):
            with store.atomic():
                store.ensure_run("half")
                store.write_metrics("half", rows(range(100)))
                raise RuntimeError("import failed midway")
        assert store.get_run("half") is None
        store.ensure_run("half")  # the id cache forgot the rolled-back run
        store.write_metrics("half", rows(range(5)))
        assert store.count_rows("half") == 5


def test_events_deduplicate_and_keep_payloads(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        events = [
            {"step": 100, "kind": "checkpoint", "payload": {"path": "/ck/100"}},
            {"step": 100, "kind": "eval", "payload": {"kind": "heldout"}},
            {"step": 150, "kind": "resume", "payload": {"restored_step": 100, "restored_data_position": 3200,
                                                          "global_batch_size": np.int64(32)}, "attempt": 2},
        ]
        store.write_events("r", events)
        store.write_events("r", events)
        got = store.read_events("r")
        assert got["kind"].tolist() == ["checkpoint", "eval", "resume"]
        assert got.iloc[2]["payload"]["global_batch_size"] == 32 and got.iloc[2]["attempt"] == 2
        assert store.read_events("r", kinds=["resume"])["step"].tolist() == [150]


def test_detections_upsert_by_interval(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        d = Detection(run="r", detector="spike", metric="train/loss", start_step=10, end_step=12, peak_step=11,
                      score=7.5, severity=Severity.WARNING, message="spike", evidence={"z": np.float64(7.5),
                                                                                     "bad": math.nan})
        store.write_detections([d])
        assert store.read_detections("r")[0].known_step is None
        d.end_step, d.severity, d.known_step = 20, Severity.CRITICAL, 11
        store.write_detections([d])
        got = store.read_detections("r")
        assert len(got) == 1 and got[0].end_step == 20 and got[0].severity is Severity.CRITICAL
        assert got[0].known_step == 11 and got[0].known_at == 11
        assert got[0].evidence == {"z": 7.5, "bad": "nan"}
        store.clear_detections("r")
        assert store.read_detections("r") == []


def test_list_runs_reports_last_step_and_keys(store_url):
    with open_store(store_url) as store:
        store.ensure_run("a")
        store.ensure_run("b")
        store.write_metrics("a", pd.concat([rows(range(50)), rows(range(0, 80, 10), key="eval/heldout/c4/loss")]))
        runs = store.list_runs().set_index("name")
        assert runs.loc["a", "last_step"] == 70
        assert pd.isna(runs.loc["b", "last_step"])
        assert store.list_keys("a") == ["eval/heldout/c4/loss", "train/loss"]


def test_delete_run_removes_everything(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", rows(range(10)))
        store.delete_run("r")
        assert store.get_run("r") is None
        store.ensure_run("r")
        assert store.count_rows("r") == 0
        assert store.read_scalars("r", ["train/loss"]).empty


def test_service_state_round_trip(store_url):
    with open_store(store_url) as store:
        assert store.load_state("watch") is None
        store.save_state("watch", {"spike": {"window": [1.0, 2.0]}})
        store.save_state("watch", {"spike": {"window": [3.0]}})
        assert store.load_state("watch") == {"spike": {"window": [3.0]}}
        for name in ("watch/a_b", "watch/a%b", "watch/axb", "detect/a_b/not_judged"):
            store.save_state(name, {})
        assert store.state_names("watch/") == ["watch/a%b", "watch/a_b", "watch/axb"]
        assert store.state_names("watch/a_") == ["watch/a_b"]  # `_` and `%` are no wildcards
        assert store.state_names("watch/a%") == ["watch/a%b"] and store.state_names("none/") == []


def test_a_write_reports_its_progress_and_stopping_there_leaves_nothing(store_url):
    """write_metrics calls progress() as parts of the write are answered (the logging client
    tells a slow store from a silent one by it); raising there undoes the whole write."""
    calls = []

    def stop_at_the_third():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("stopped")

    with open_store(store_url) as store:
        store.ensure_run("r")
        frame = pd.concat([rows(range(1000), key=f"layers/l{i}_norm") for i in range(3)])
        with pytest.raises(RuntimeError, match="stopped"):
            store.write_metrics("r", frame, progress=stop_at_the_third)
        assert store.count_rows("r") == 0
        counted = []
        assert store.write_metrics("r", frame, progress=lambda: counted.append(1)) == 3000
        assert store.count_rows("r") == 3000 and len(counted) >= 3
