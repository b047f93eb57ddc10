"""The detectors on real training logs (../shared/data/runs), read by our importers and aligned
as `gapwatch detect` aligns them.

* The 13 repeats of one modded-nanogpt config and the OLMo 2 ladder run/rerun pairs differ only
  by noise and seed: no divergence, memorization or eval alarm, in either direction.
* SOAP and Muon share real loss spikes at steps 919 and 947 (same data order): divergence must
  not report them, whatever else the two optimizers differ in.
* llm.c GPT-2 124M: the grad-norm spikes at 7,435 and 9,025 and the loss spikes the data notes
  list are found.
"""

from __future__ import annotations

import itertools

import pytest

from monitor.detection import DetectConfig, judge
from monitor.importers import load

RUNS = "runs/modded-nanogpt"
COMPARING = ["reference_divergence", "memorization", "heldout_divergence", "eval_regression"]


@pytest.fixture(scope="module")
def repeats(shared_data):
    files = sorted((shared_data / RUNS / "valueembed_seeds_2024-12-04").glob("*.txt"))
    assert len(files) == 13
    return [load(f).to_run_data(f.stem[:8]) for f in files]


def alarms(run, reference, detectors=COMPARING, **params):
    return judge(run, reference, DetectConfig(detectors=detectors, params=params, write_series=False)).detections


def test_no_alarm_between_any_two_of_the_13_repeats(repeats):
    fired = []
    for a, b in itertools.permutations(repeats, 2):
        # the within-run half of memorization depends on one run only: judged once per run below
        found = alarms(a, b, memorization={"within_run": False})
        fired += [(a.name, b.name, d.detector, d.metric, d.start_step) for d in found]
    assert fired == []


def test_no_within_run_memorization_on_real_single_epoch_runs(shared_data, repeats):
    others = [shared_data / RUNS / "llmc_gpt2_124M_2024-10-13/main.log",
              *sorted((shared_data / RUNS / "soap_vs_muon_2024-10").glob("*.txt")),
              *sorted((shared_data / RUNS / "scaleup1b_2024-10-20").glob("*.txt"))]
    runs = repeats + [load(p).to_run_data(p.stem[:8]) for p in others]
    assert len(runs) == 13 + 6
    for run in runs:
        assert alarms(run, None, ["memorization", "eval_regression"]) == [], run.name


@pytest.mark.parametrize("size", ["190M", "1B", "3B"])
def test_no_alarm_between_olmo_ladder_run_and_rerun(shared_data, size):
    folder = shared_data / "runs/olmo-wandb-exports/ladder"
    run = load(folder / f"peteish-moreeval__{size}-1xC.csv").to_run_data(f"{size}")
    rerun = load(folder / f"peteish-moreeval__{size}-1xC-rerun.csv").to_run_data(f"{size}-rerun")
    assert any(c.startswith("eval/heldout/") for c in run.scalars)  # the comparison has material
    assert alarms(run, rerun) == [] and alarms(rerun, run) == []


def test_soap_and_muon_shared_spikes_are_not_divergence(shared_data):
    folder = shared_data / RUNS / "soap_vs_muon_2024-10"
    soap = load(next(folder.glob("SOAP_*.txt"))).to_run_data("soap")
    muon = load(next(folder.glob("Muon_*.txt"))).to_run_data("muon")
    for run, ref in ((soap, muon), (muon, soap)):
        loss = run.series("train/loss")
        assert loss.loc[919] - loss.loc[918] > 1.0 and loss.loc[947] - loss.loc[946] > 1.0  # they are there
        for d in alarms(run, ref, ["reference_divergence"]):
            assert not (d.start_step <= 919 <= d.end_step or d.start_step <= 947 <= d.end_step), d


def test_llmc_spikes_found(shared_data):
    run = load(shared_data / RUNS / "llmc_gpt2_124M_2024-10-13/main.log").to_run_data("llmc")
    found = alarms(run, None, ["spike"])
    grad = {d.peak_step: d for d in found if d.metric == "train/grad_norm"}
    assert {7435, 9025} <= set(grad)
    assert grad[9025].evidence["ratio"] > 5 and grad[7435].evidence["ratio"] > 4
    loss = {d.peak_step for d in found if d.metric == "train/loss"}
    assert {4708, 5052, 5618, 6270, 7435} <= loss
    assert alarms(run, None, ["nonfinite", "resume", "memorization"]) == []
