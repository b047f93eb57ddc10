"""Findings grouped into incidents on a real pair: Muon against AdamW at 1.5B (modded-nanogpt, the
same data order), imported with `gapwatch import` and judged with `gapwatch detect` and `report`.
Judged one detection at a time they are 262 findings, 160 of them the ~2 s stalls that come in
bursts every ~920 steps; grouped, they are a few dozen rows with the stalls as one."""

from __future__ import annotations

import json

import pytest

from app.cli import main

SCALEUP = "runs/modded-nanogpt/scaleup1b_2024-10-20"
A_FEW_DOZEN = 40


@pytest.fixture(scope="module")
def real_pair(shared_data, tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('real-pair') / 'store.db'}"
    folder = shared_data / SCALEUP
    muon = next(folder.glob("ad8d7ae5*.txt"))
    adamw = next(folder.glob("87bd51fd*.txt"))
    assert main(["import", str(muon), "--run", "muon-1.5b", "--store", url]) == 0
    assert main(["import", str(adamw), "--run", "adamw-1.5b", "--reference-of", "muon-1.5b", "--store", url]) == 0
    return url


def test_detect_groups_262_detections_into_a_few_dozen_incidents(real_pair, capsys):
    assert main(["detect", "--run", "muon-1.5b", "--store", real_pair, "--json", "--no-write"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) <= A_FEW_DOZEN
    assert sum(r["count"] for r in rows) > 200  # every detection is in one incident
    (stalls,) = [r for r in rows if r["detector"] == "throughput"]
    assert stalls["count"] > 100 and stalls["period_steps"] > 0 and stalls["episodes"] > 5
    assert "stall" in stalls["message"]
    divergence = next(r for r in rows if r["detector"] == "reference_divergence")
    # The headline gives the median gap and the band each window had to clear, not the peak.
    assert divergence["count"] == 1 and "median of the window medians" in divergence["message"]
    assert f"±{divergence['evidence']['band_median']:.3f}" in divergence["message"]
    assert divergence["evidence"]["delta_median"] == pytest.approx(-0.21, abs=0.01)
    assert "see memorization" not in divergence["message"]  # held-out loss followed
    # Most severe first.
    assert [r["severity"] for r in rows[:2]] == ["critical", "critical"]


def test_detect_rows_in_a_pipe_are_one_line_each(real_pair, capsys):
    assert main(["detect", "--run", "muon-1.5b", "--store", real_pair, "--no-write"]) == 0
    captured = capsys.readouterr()
    header, *lines = captured.out.splitlines()
    assert header.split("\t") == ["severity", "incident", "id", "state", "steps", "count", "finding"]
    assert 0 < len(lines) <= A_FEW_DOZEN and all(len(line.split("\t")) == 7 for line in lines)
    stall = next(line for line in lines if "\tsteps slowed down or stalled\t" in line)
    assert "160 times in" in stall and "s lost in all" in stall
    assert "muon-1.5b against adamw-1.5b" in captured.err


def test_report_lists_incidents_of_both_runs(real_pair, capsys):
    assert main(["report", "--run", "muon-1.5b", "--store", real_pair, "--format", "json", "-o", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["tables"]["findings"]["rows"]
    assert len(rows) <= A_FEW_DOZEN
    assert sorted(r["run"] for r in rows if r["detector"] == "throughput") == ["adamw-1.5b", "muon-1.5b"]
    assert sum(r["count"] for r in rows) == len(doc["detections"]) > 400
