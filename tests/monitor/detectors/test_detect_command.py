"""`gapwatch detect` and monitor.judging.judge on real stores: table, JSON, stored detections and
spike-score series, clear one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from monitor.judging.judge import DetectConfig, detect_stored, load_not_judged
from monitor.detectors.spike import change_points
from monitor.schema import SPIKE_SCORE_LOSS, TRAIN_LOSS, EventKind
from monitor.store import open_store

from .synth import pair, run, train_loss

KEYS = {"detector", "metric", "start_step", "end_step", "peak_step", "severity", "score", "message", "evidence"}
GROUP_KEYS = KEYS | {"count", "episodes", "period_steps", "incident_id", "story", "name", "state", "explanations", "spans"}


def put(store, data, reference=None, config=None):
    store.ensure_run(data.name, config=config or {}, reference=reference)
    long = data.scalars.reset_index().melt(id_vars="step", var_name="key", value_name="value").dropna()
    store.write_metrics(data.name, long)


def fill(url):
    run, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25)
    run.scalars.loc[[1500, 6000], TRAIN_LOSS] += 1.5
    with open_store(url) as store:
        put(store, ref)
        put(store, run, reference="reference", config={"global_batch_size": 32})
        store.write_events("run", [{"step": 5000, "kind": EventKind.RESUME,
                                    "payload": {"restored_step": 5001, "restored_data_position": 5000 * 32,
                                                "global_batch_size": 32}}])
    return url


@pytest.fixture
def memorizing_store(sqlite_url):
    return fill(sqlite_url)


def test_detect_stores_detections_and_spike_scores(store_url):
    with open_store(fill(store_url)) as store:
        result = detect_stored(store, "run")  # the reference recorded for the run
        assert result.reference == "reference" and result.axis == "step"
        kinds = {(d.detector, d.metric) for d in result.detections}
        assert {("reference_divergence", TRAIN_LOSS), ("memorization", TRAIN_LOSS), ("spike", TRAIN_LOSS),
                ("resume", "event/resume")} <= kinds
        stored = store.read_detections("run")
        assert {(d.detector, d.metric, d.start_step) for d in stored} == {
            (d.detector, d.metric, d.start_step) for d in result.detections}
        score = store.read_derived("run", [SPIKE_SCORE_LOSS])
        assert len(score) > 0 and score["value"].max() > 0
        assert SPIKE_SCORE_LOSS not in store.list_keys("run"), "derived series stay apart from the logged ones"
        # judging again upserts: nothing doubles
        detect_stored(store, "run")
        assert len(store.read_detections("run")) == len(stored)


def test_what_was_not_judged_is_stored_with_the_detections(sqlite_url):
    with open_store(fill(sqlite_url)) as store:
        assert load_not_judged(store, "reference") is None  # never judged: nothing to say yet
        result = detect_stored(store, "reference")  # no reference of its own
        assert "reference_divergence" in result.skipped
        stored = load_not_judged(store, "reference")
        assert list(stored.items) == result.not_judged and any(n.detector == "heldout_divergence" for n in stored.items)
        assert stored.to_step == store.load_run("reference").scalars.index[-1]


def test_cli_json(memorizing_store, capsys):
    code = main(["detect", "--run", "run", "--store", memorizing_store, "--json",
                 "--detectors", "reference_divergence,memorization"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    # one incident: memorization names it and absorbs "train loss below the reference"
    assert [(r["story"], r["detector"]) for r in rows] == [("memorization", "memorization")]
    assert all(set(r) == GROUP_KEYS and r["count"] >= 1 for r in rows)
    mem = rows[0]
    assert "train loss below the reference" in mem["explanations"]
    assert mem["severity"] == "critical" and mem["evidence"]["train_delta"] < -0.2
    assert main(["detect", "--run", "run", "--store", memorizing_store, "--json", "--ungrouped", "--no-write",
                 "--detectors", "reference_divergence,memorization"]) == 0
    each = json.loads(capsys.readouterr().out)
    assert all(set(r) == KEYS for r in each) and len(each) >= len(rows)


def test_cli_table_without_reference_skips_comparisons(memorizing_store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["detect", "--run", "reference", "--store", memorizing_store, "--no-write"]) == 0
    err = capsys.readouterr().err
    assert "train loss against the reference: not judged, it compares with a reference run and none was given" in err
    assert main(["detect", "--run", "run", "--store", memorizing_store, "--detectors", "memorization,resume"]) == 0
    out = capsys.readouterr().out
    assert "memorization" in out and "critical" in out and "repeated training data" in out


@pytest.mark.parametrize("args, problem", [
    (["--run", "nope"], "no run named 'nope'"),
    (["--run", "run", "--detectors", "spike,bogus"], "unknown detector(s) bogus"),
    (["--run", "run", "--reference", "missing"], "reference 'missing' of 'run' is not in"),
])
def test_cli_errors_are_one_line(memorizing_store, args, problem, capsys):
    assert main(["detect", "--store", memorizing_store, *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    # Progress lines may come first (stderr is no terminal here); the error is one line, the last.
    assert problem in lines[-1] and all(": [" in line and "s] " in line for line in lines[:-1]), lines


def test_cli_as_a_process(memorizing_store):
    out = subprocess.run([sys.executable, "-m", "app", "detect", "--run", "run", "--store", memorizing_store,
                          "--json", "--detectors", "resume"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["detector"] == "resume" and row["start_step"] == 5000 and row["evidence"]["delta"] == -1.0


def test_replace_forgets_stale_detections(sqlite_url):
    run, ref = pair(n_steps=8000, offset_from=4000, offset=-0.25)
    with open_store(sqlite_url) as store:
        put(store, ref)
        put(store, run, reference="reference")
        detect_stored(store, "run", config=DetectConfig(detectors=["reference_divergence"]))
        store.write_metrics("run", pd.DataFrame({"step": np.arange(4000, 8001), "key": TRAIN_LOSS,
                                                 "value": ref.scalars[TRAIN_LOSS].loc[4000:8000].to_numpy(),
                                                 "attempt": 2}))
        detect_stored(store, "run", config=DetectConfig(detectors=["reference_divergence"]))
        assert store.read_detections("run")  # the old interval stays without --replace
        detect_stored(store, "run", config=DetectConfig(detectors=["reference_divergence"], replace=True))
        assert store.read_detections("run") == []


def test_change_points_keep_the_shape_of_a_step_series():
    steps = np.arange(100)
    values = np.where(steps < 40, 0.0, np.where(steps < 70, 0.01, 0.0))
    keep = change_points(values)
    assert steps[keep].tolist() == [0, 39, 40, 69, 70, 99]
    drawn = np.interp(steps, steps[keep], values[keep])
    assert np.allclose(drawn[[0, 39, 40, 55, 69, 70, 99]], values[[0, 39, 40, 55, 69, 70, 99]])


def test_cli_says_which_steps_a_shorter_reference_left_unjudged_and_why_a_later_run_shares_none(sqlite_url, capsys):
    # The reference logged steps 1-900; one run goes on to 3,000, another begins at 1,000.
    steps = np.arange(1, 3001)
    with open_store(sqlite_url) as store:
        for name, first, last, reference in (("early", 1, 900, None), ("full", 1, 3000, "early"),
                                             ("late", 1000, 3000, "early")):
            kept = steps[(steps >= first) & (steps <= last)]
            put(store, run(name, pd.DataFrame({TRAIN_LOSS: train_loss(kept, seed=1)}, index=kept)), reference)
    assert main(["detect", "--run", "full", "--store", sqlite_url, "--no-write"]) == 0
    assert ("train loss against the reference (train/loss): not judged, on steps 901–3,000: the reference stops "
            "at step 900") in capsys.readouterr().err
    assert main(["detect", "--run", "late", "--store", sqlite_url, "--no-write"]) == 0
    err = capsys.readouterr().err
    assert ("train loss against the reference (train/loss): not judged, the runs logged train/loss at no common "
            "step: the run at steps 1,000–3,000, the reference at steps 1–900") in err
    assert "the reference logs no train/loss" not in err
