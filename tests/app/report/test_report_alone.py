"""`gapwatch report` on a run with no reference: the run judged alone, its own findings naming the
verdict, and every table that compares saying why it is empty; never a refusal."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from monitor.store import open_store

from app.cli import main
from app.report import alone, build_report, load_pair
from app.report.pair import NO_REFERENCE

COMPARING_TABLES = ("train_delta", "heldout", "downstream", "settings")


@pytest.fixture
def lone_run(synthetic, store_run, sqlite_url):
    """A store (URL) holding a run with no reference: grad-norm spikes and stalls of its own."""
    with open_store(sqlite_url) as store:
        store_run(store, synthetic(name="solo", seed=3, steps=1500, grad_spikes=(700, 900), stalls=(1200,)))
    return sqlite_url


def test_a_run_without_a_reference_is_reported_alone(lone_run, tmp_path):
    for name in ("r.html", "r.md", "r.json"):
        assert main(["report", "--run", "solo", "--store", lone_run, "-o", str(tmp_path / name)]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["reference"] is None
    tables = doc["tables"]
    for table_id in COMPARING_TABLES:
        assert not tables[table_id]["rows"] and tables[table_id]["empty_reason"] == NO_REFERENCE
    # What a run alone can show is shown: its spikes, its throughput, its findings.
    spikes = [r for r in tables["spikes"]["rows"] if r["metric"] == "train/grad_norm"]
    assert [r["run"] for r in tables["spikes"]["rows"]] == ["solo", "solo"] and spikes[0]["spikes"] >= 2
    assert spikes[0]["shared"] == "—"
    assert [r["run"] for r in tables["throughput"]["rows"]] == ["solo"]
    assert {r["run"] for r in tables["findings"]["rows"]} == {"solo"} and tables["findings"]["rows"]
    assert any("none was given" in r["reason"] for r in tables["not_judged"]["rows"])
    assert [n for n in doc["notes"] if NO_REFERENCE in n] == [
        f"{'; '.join(tables[t]['title'] for t in COMPARING_TABLES)}: {NO_REFERENCE}."]  # said once
    assert (tmp_path / "r.md").read_text().startswith("## gapwatch report: solo, alone (no reference)")
    html = (tmp_path / "r.html").read_text()
    assert "alone: no reference" in html and 'id="fig-overlay"' in html and "vs reference" not in html


def test_a_finding_of_the_run_alone_names_the_verdict(synthetic, store_run, sqlite_url):
    with open_store(sqlite_url) as store:
        broken = synthetic(name="broken", seed=3, steps=1500)
        broken.scalars.loc[800, "train/loss"] = math.nan  # left out here, logged as NaN below
        store_run(store, broken)
        store.write_metrics("broken", pd.DataFrame({"step": [800], "key": ["train/loss"], "value": [math.nan]}))
        report = build_report(load_pair(store, "broken"))
    assert report.reference is None
    assert report.verdict.kind == "nonfinite" and report.verdict.severity == "critical"
    # Spikes alone name no verdict, here as with a reference: they are its caveats.
    spiky = build_report(alone(synthetic(name="spiky", seed=3, steps=1500, grad_spikes=(700, 900))))
    assert spiky.verdict.kind == "alone" and spiky.verdict.headline == "No reference"
    assert "whether it trains as another run of its recipe does was not judged" in spiky.verdict.sentence
    assert "Caveats: 1 incident(s) (train/grad_norm spikes)" in spiky.verdict.sentence
