"""Findings grouped into incidents on a real pair: Muon against AdamW at 1.5B (modded-nanogpt, the
same data order), imported with `gapwatch import` and judged with `gapwatch detect` and `report`.
Judged one detection at a time they are 262 findings: 160 of them the ~2 s stalls that come in
bursts at a steady period, 100 the loss spikes of a noisy run, which come back every few hundred to
few thousand steps. Grouped, they are three rows: the improvement, the spikes and the stalls."""

from __future__ import annotations

import json
import re

import pytest

from app.cli import main

SCALEUP = "runs/modded-nanogpt/scaleup1b_2024-10-20"


@pytest.fixture(scope="module")
def real_pair(shared_data, tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('real-pair') / 'store.db'}"
    folder = shared_data / SCALEUP
    muon = next(folder.glob("ad8d7ae5*.txt"))
    adamw = next(folder.glob("87bd51fd*.txt"))
    assert main(["import", str(muon), "--run", "muon-1.5b", "--store", url]) == 0
    assert main(["import", str(adamw), "--run", "adamw-1.5b", "--reference-of", "muon-1.5b", "--store", url]) == 0
    return url


def test_detect_groups_262_detections_into_one_row_per_problem(real_pair, capsys):
    assert main(["detect", "--run", "muon-1.5b", "--store", real_pair, "--json", "--no-write"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in rows) == ["held-out loss diverged from the reference", "loss spikes",
                                               "steps slowed down or stalled"]
    assert sum(r["count"] for r in rows) > 200  # every detection is in one incident
    (stalls,) = [r for r in rows if r["detector"] == "throughput"]
    assert stalls["count"] > 100 and stalls["period_steps"] > 0 and stalls["episodes"] > 5
    assert "stall" in stalls["message"]
    # The spikes come back at no steady period: one recurring incident, its episodes counted.
    (spikes,) = [r for r in rows if r["name"] == "loss spikes"]
    assert spikes["episodes"] > 5 and spikes["period_steps"] is None and spikes["state"] == "resolved"
    # Train loss below the reference early and held-out loss below it from step 500 to the end: one
    # improvement, named by the held-out divergence, with the train finding attached.
    (divergence,) = [r for r in rows if r["story"] == "divergence"]
    assert divergence["name"] == "held-out loss diverged from the reference" and divergence["state"] == "open"
    assert divergence["count"] == 2 and divergence["explanations"][1:] == ["train loss below the reference"]
    train = divergence["evidence"]["also"]["train loss below the reference"]
    assert train["detector"] == "reference_divergence" and train["steps"] == [1, 2099]
    assert "held-out loss followed" in train["message"]  # a better run, not repeated data
    # Most severe first.
    rank = {"info": 0, "warning": 1, "critical": 2}
    assert rows[0] == divergence and [rank[r["severity"]] for r in rows] == sorted(
        (rank[r["severity"]] for r in rows), reverse=True)


def test_the_train_finding_gives_the_median_gap_and_the_band_each_window_cleared(real_pair, capsys):
    assert main(["detect", "--run", "muon-1.5b", "--store", real_pair, "--json", "--no-write", "--ungrouped"]) == 0
    (train,) = [r for r in json.loads(capsys.readouterr().out) if r["detector"] == "reference_divergence"]
    assert "median of the window medians" in train["message"]  # not the peak
    assert f"±{train['evidence']['band_median']:.3f}" in train["message"]
    assert train["evidence"]["delta_median"] == pytest.approx(-0.21, abs=0.01)
    assert "memorization detector" not in train["message"] and "a better run" in train["message"]  # held-out followed


def test_detect_rows_in_a_pipe_are_one_line_each(real_pair, capsys):
    assert main(["detect", "--run", "muon-1.5b", "--store", real_pair, "--no-write"]) == 0
    captured = capsys.readouterr()
    header, *lines = captured.out.splitlines()
    assert header.split("\t") == ["severity", "incident", "id", "state", "steps", "detections", "finding"]
    assert len(lines) == 3 and all(len(line.split("\t")) == 7 for line in lines)
    stall = next(line for line in lines if "\tsteps slowed down or stalled\t" in line)
    assert "160 times in" in stall and ", one every ~" in stall and "s lost in all" in stall
    spikes = next(line for line in lines if "\tloss spikes\t" in line)
    assert re.search(r"\t\d+ times in \d+ episodes; worst at step ", spikes) and "one every" not in spikes
    # One held-out divergence with the train-loss finding named after it: not "2 times".
    divergence = next(line for line in lines if "\theld-out loss diverged from the reference\t" in line)
    finding = divergence.split("\t")[-1]
    assert finding.startswith("held-out") and "times" not in finding, finding
    assert finding.endswith("; also: train loss below the reference"), finding
    assert "muon-1.5b against adamw-1.5b" in captured.err


def test_report_lists_incidents_of_both_runs(real_pair, capsys):
    assert main(["report", "--run", "muon-1.5b", "--store", real_pair, "--format", "json", "-o", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["tables"]["findings"]["rows"]
    # One row per problem of each run: the improvement, and each run's spikes and stalls.
    assert sorted((r["run"], r["incident"]) for r in rows) == [
        ("adamw-1.5b", "loss spikes"), ("adamw-1.5b", "steps slowed down or stalled"),
        ("muon-1.5b", "held-out loss diverged from the reference"), ("muon-1.5b", "loss spikes"),
        ("muon-1.5b", "steps slowed down or stalled")]
    assert sorted(r["run"] for r in rows if r["detector"] == "throughput") == ["adamw-1.5b", "muon-1.5b"]
    assert sum(r["count"] for r in rows) == len(doc["detections"]) > 400
