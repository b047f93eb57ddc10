"""The three formats say the same thing, and no text from a run becomes markup in any of them."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from monitor import schema
from monitor.schema import RunData, Severity

from app.report import build_report, compare, render_html, render_json, render_markdown
from app.report.model import Column, Table

HOSTILE_RUN = "<img src=x onerror=alert(1)>|**run**"
HOSTILE_REF = "</script><script>alert(2)</script>"


@pytest.fixture
def report(synthetic):
    run = synthetic(name=HOSTILE_RUN, seed=1, train_shift=-0.2, shift_from=2001, grad_spikes=(1200,),
                    stalls=(500, 1500))
    ref = synthetic(name=HOSTILE_REF, seed=2)
    return build_report(compare(run, ref))


def test_json_is_strict_and_keeps_numbers(report):
    doc = json.loads(render_json(report))  # allow_nan=False in the writer: no NaN/Infinity tokens
    assert doc["run"] == HOSTILE_RUN and doc["reference"] == HOSTILE_REF
    assert doc["verdict"]["kind"] == report.verdict.kind
    rows = doc["tables"]["train_delta"]["rows"]
    assert rows[-1]["delta"]["value"] == pytest.approx(-0.2, abs=0.02)
    assert rows[-1]["delta"]["stderr"] > 0 and rows[-1]["delta"]["estimated"] is False
    assert set(doc["tables"]) == {"train_delta", "heldout", "downstream", "spikes", "resumes", "data",
                                  "throughput", "energy", "findings", "not_judged", "settings"}
    assert {d["detector"] for d in doc["detections"]} >= {"reference_divergence", "spike", "throughput"}


def test_markdown_escapes_run_text(report):
    text = render_markdown(report)
    assert not re.search(r"(?<!\\)<(img|/?script)", text)
    assert "\\<img src=x onerror=alert(1)\\>\\|\\*\\*run\\*\\*" in text
    # Every table row keeps its column count: escaped pipes do not split cells.
    header = next(line for line in text.splitlines() if line.startswith("| steps |"))
    n_cells = len(re.split(r"(?<!\\)\|", header))
    block = text[text.index(header):].split("\n\n")[0].splitlines()
    assert len(block) > 3
    assert all(len(re.split(r"(?<!\\)\|", line)) == n_cells for line in block)
    assert text.splitlines()[2].startswith("> **Memorization suspected.**")


def test_html_escapes_run_text_and_needs_no_network(report):
    html = render_html(report)
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;|**run**" in html
    assert "</script><script>alert(2)" not in html
    assert 'http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;;' in html
    # plotly.js inlined exactly once, and nothing of ours is loaded by URL (the library's own
    # source mentions map-tile URLs that only geo charts would use).
    lib = get_plotlyjs()
    assert html.count(lib) == 1
    ours = html.replace(lib, "")
    assert "<script src" not in ours and not re.search(r"""(src|href)=["']?(https?:)?//""", ours)
    ids = re.findall(r'<figure id="(fig-[a-z-]+)">', html)
    assert ids[:2] == ["fig-overlay", "fig-delta"]
    assert {"fig-heldout", "fig-downstream", "fig-grad-norm", "fig-throughput", "fig-findings"} <= set(ids)


def test_the_findings_chart_draws_the_runs_incidents_by_their_names(report):
    chart = next(f for f in report.figures if f.id == "fig-findings")
    rows = {y.replace("<br>", " ") for trace in chart.figure.data for y in trace.y}
    table = next(t for t in report.tables if t.id == "findings")
    named = {r["incident"] for r in table.rows if r["run"] == HOSTILE_RUN}
    assert rows and {r.split(" (")[0] for r in rows} == named
    assert not any(d in r for r in rows for d in ("reference_divergence", "throughput ·", "spike ·"))


def test_markdown_and_json_carry_no_charts(report):
    assert "plotly" not in render_markdown(report).lower()
    assert "plotly" not in render_json(report).lower()


def test_long_tables_fold_in_html_and_are_cut_in_markdown(synthetic):
    report = build_report(compare(synthetic(name="a", seed=1), synthetic(name="b", seed=2)))
    report.tables.append(Table("many", "Many rows", [Column("i", "i", fmt="d")], rows=[{"i": i} for i in range(40)]))
    html = render_html(report)
    assert "<summary>15 more rows</summary>" in html
    md = render_markdown(report, max_rows=10)
    assert "_30 more rows in the HTML and JSON reports._" in md


def test_findings_table_lists_every_incident_most_severe_first(report):
    rows = report.table("findings").rows
    assert 0 < len(rows) <= len(report.detections)
    assert sum(r["count"] for r in rows) == len(report.detections)
    ranks = [Severity(r["severity"]).rank for r in rows]
    assert ranks == sorted(ranks, reverse=True)
    assert {r["detector"] for r in rows} >= {"memorization", "spike", "throughput"}
    # train loss below the reference is part of the memorization incident, which it names
    assert not [r for r in rows if r["incident"] == "train loss below the reference"]
    with pytest.raises(KeyError):
        report.table("no-such-table")


def test_run_that_went_nan_is_reported_and_renders(synthetic):
    run = synthetic(name="nan-run", seed=1)
    bad = run.scalars.index >= 2500
    run.scalars.loc[bad, schema.TRAIN_LOSS] = np.nan
    run.scalars.loc[run.scalars.index == 2600, schema.TRAIN_GRAD_NORM] = np.inf
    # The run logged these values itself: they are data, not gaps.
    run = RunData(info=run.info, scalars=run.scalars, events=run.events,
                  logged_nonfinite=pd.DataFrame({"key": [schema.TRAIN_LOSS] * int(bad.sum()) + [schema.TRAIN_GRAD_NORM],
                                                 "step": list(run.scalars.index[bad]) + [2600],
                                                 "value": [math.nan] * int(bad.sum()) + [math.inf]}))
    report = build_report(compare(run, synthetic(name="ref", seed=2)))
    assert report.verdict.kind == "nonfinite"
    doc = json.loads(render_json(report))  # strict JSON even with NaN/Inf in the run
    assert doc["verdict"]["kind"] == "nonfinite"
    assert "<!DOCTYPE html>" in render_html(report) and render_markdown(report)
