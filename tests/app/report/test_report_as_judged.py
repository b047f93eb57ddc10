"""The report from a store says what it said when the pair was aligned twice: once for the
tables, once more inside `judge`, exactly as `gapwatch detect` judges. `load_pair` now aligns
once and hands the aligned pair to the detectors (`judge_aligned`), and a run's frame is built
column by column from the store; here the JSON and every chart of both ways must be equal, on a
real pair (the OLMo 2 1B ladder run and its rerun) and on a synthetic pair with every fault the
report shows, its run carrying the spike scores a `gapwatch detect` stored."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from monitor.judging.align import align_pair
from monitor.judging.engine import no_reference
from monitor.judging.judge import DetectConfig, detect_stored, judge
from monitor.importers import load
from monitor.schema import RunData
from monitor.store import open_store

from app.report import build_report, load_pair, render_json
from app.report.pair import ComparedPair

LADDER = "runs/olmo-wandb-exports/ladder"


def aligned_twice(run: RunData, reference: RunData) -> ComparedPair:
    """The report's inputs as they were built before: the pair aligned for the tables, and the
    detectors given the unaligned reference to align themselves."""
    detect = DetectConfig(write_series=True)
    aligned_run, aligned_ref = align_pair(run, reference, axis=detect.axis)
    judged = judge(run, reference, detect)
    alone = judge(reference, None, detect)
    meta = aligned_run.info.alignment
    return ComparedPair(run=run, reference=reference, aligned_run=aligned_run, aligned_reference=aligned_ref,
                        axis=meta.axis, axis_reason=meta.reason, detections=judged.detections,
                        reference_detections=alone.detections, cleans=judged.cleans + alone.cleans,
                        not_judged={run.name: judged.not_judged,
                                    reference.name: [n for n in alone.not_judged if n != no_reference(n.detector)]},
                        detector_series={run.name: judged.series, reference.name: alone.series}, detect=detect)


def report_contents(pair: ComparedPair) -> tuple[dict, dict]:
    """(the JSON report without its time of writing, every chart's plotly JSON by id)."""
    report = build_report(pair)
    doc = json.loads(render_json(report))
    doc.pop("generated_at")
    return doc, {f.id: json.loads(f.figure.to_json()) for f in report.figures}


def assert_same_report(url: str, run: str, reference: str) -> tuple[ComparedPair, dict]:
    with open_store(url, read_only=True) as store:
        pair = load_pair(store, run, reference)
        stored_run, stored_ref = store.load_run(run), store.load_run(reference)
    doc, figures = report_contents(pair)
    before_doc, before_figures = report_contents(aligned_twice(stored_run, stored_ref))
    assert doc == before_doc
    assert figures.keys() == before_figures.keys()
    for key in figures:
        assert figures[key] == before_figures[key], key
    return pair, doc


def test_real_pair_reports_as_when_aligned_twice(shared_data, tmp_path):
    base = shared_data / LADDER
    url = f"sqlite:///{tmp_path / 'store.db'}"
    imported = {}
    with open_store(url) as store:
        for name, file in (("peteish-1B-rerun", "peteish-moreeval__1B-1xC-rerun.csv"),
                           ("peteish-1B", "peteish-moreeval__1B-1xC.csv")):
            imported[name] = load(base / file).to_run_data(name)
            long = imported[name].scalars.reset_index().melt(id_vars="step", var_name="key").dropna()
            store.ensure_run(name, reference="peteish-1B-rerun" if name == "peteish-1B" else None)
            store.write_metrics(name, long)
    pair, doc = assert_same_report(url, "peteish-1B", "peteish-1B-rerun")
    # What the store hands back is what was imported, value for value.
    for data in (pair.run, pair.reference):
        pd.testing.assert_frame_equal(data.scalars, imported[data.name].scalars)
    assert len(doc["tables"]["heldout"]["rows"]) == 11 and len(doc["tables"]["downstream"]["rows"]) >= 40


def test_synthetic_pair_with_stored_spike_scores_reports_as_when_aligned_twice(synthetic, store_run, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run = synthetic(name="cand", seed=1, train_shift=-0.2, shift_from=2001, grad_spikes=(1200, 2400),
                    stalls=(500, 1500), heldout_shift=-0.05,
                    events=[{"step": 1000, "kind": "resume", "attempt": 2, "payload": {}}])
    ref = synthetic(name="ref", seed=2)
    with open_store(url) as store:
        store_run(store, ref)
        store_run(store, run, reference="ref")
        detect_stored(store, "cand")  # stores the spike scores, apart from the logged rows
    pair, doc = assert_same_report(url, "cand", "ref")
    assert {d.detector for d in pair.detections} >= {"spike", "reference_divergence"}
    assert doc["tables"]["train_delta"]["rows"] and doc["tables"]["spikes"]["rows"]
    assert not [k for k in pair.run.scalars.columns if k.startswith("detect/")], "the run is read as logged"
    # The aligned run is the stored run less those columns: its own arrays, not a copy of them.
    for key in pair.aligned_run.scalars.columns:
        assert np.shares_memory(pair.aligned_run.scalars[key].to_numpy(), pair.run.scalars[key].to_numpy()), key
