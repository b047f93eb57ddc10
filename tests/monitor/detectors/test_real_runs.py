"""The detectors on real training logs (the real data's runs/), read by our importers and aligned
as `gapwatch detect` aligns them (numbers computed in real_results.py, shown in docs/detectors.md).

* The 13 repeats of one modded-nanogpt config and the OLMo 2 ladder run/rerun pairs differ only
  by noise and seed: no divergence, memorization or eval alarm, in either direction.
* SOAP and Muon share real loss spikes at steps 919 and 947 (same data order): divergence must
  not report them, whatever else the two optimizers differ in.
* llm.c GPT-2 124M: the grad-norm spikes at 7,435 and 9,025 and the loss spikes the data notes
  list are found.
"""

from __future__ import annotations

import pytest

from monitor.schema import TRAIN_LOSS

from . import real_results as rr


@pytest.mark.slow
def test_no_alarm_between_any_two_of_the_13_repeats(shared_data):
    result = rr.repeat_pairs()
    assert result["pairs"] == 156
    assert [(d.run, d.reference, d.detector, d.metric, d.start_step) for d in result["found"]] == []
    assert 0.01 < result["train_gap"] < 0.05  # the seeds do differ, by less than the band


@pytest.mark.parametrize("size", ["190M", "1B", "3B"])
def test_no_alarm_between_olmo_ladder_run_and_rerun(shared_data, size):
    result = rr.ladder_pair(size)
    assert result["sets"] == 11  # the comparison has material: eleven held-out sets...
    assert [(d.run, d.detector, d.metric, d.start_step) for d in result["found"]] == []
    assert result["worst_gap"] > 0.03  # ...one of which wanders well beyond c4's gap


def test_soap_and_muon_shared_spikes_are_not_divergence(shared_data):
    for label, (data, found) in rr.soap_muon().items():
        loss = data.series(TRAIN_LOSS)
        assert loss.loc[919] - loss.loc[918] > 1.0 and loss.loc[947] - loss.loc[946] > 1.0  # they are there
        for d in found:
            assert not (rr.covers(d, 919) or rr.covers(d, 947)), (label, d)


def test_llmc_spikes_found(shared_data):
    found = rr.llmc_spikes()["gapwatch"]
    assert set(rr.LLMC_GRAD_SPIKES) <= found["grad"]
    assert len(set(rr.LLMC_LOSS_SPIKES) & found["loss"]) >= 5
    # and more of the listed loss spikes than OLMo-core's rule finds
    olmo = rr.llmc_spikes()["olmo_core"]
    assert len(set(rr.LLMC_LOSS_SPIKES) & found["loss"]) >= len(set(rr.LLMC_LOSS_SPIKES) & olmo["loss"])


def test_spikes_the_repeats_share_are_found_and_none_is_a_lone_flag(shared_data):
    ours = rr.repeat_spikes()["gapwatch"]
    olmo = rr.repeat_spikes()["olmo_core"]
    assert ours[918] == 13 and ours[946] == 13  # the data-order spikes every repeat has
    assert len([s for s, n in ours.items() if n >= 2]) > len([s for s, n in olmo.items() if n >= 2])
    assert [s for s, n in ours.items() if n == 1] == []  # every flag is shared by another run


def test_single_runs_on_their_own_are_clean(shared_data):
    result = rr.single_runs_within()
    assert result["runs"] == 19
    assert [(d.run, d.detector, d.metric, d.start_step) for d in result["found"]] == []


def test_pythia_lambada_regression_is_found_and_large_models_are_clean(shared_data):
    found = rr.pythia()
    late = [d for d in found["pythia-160m"] if d.metric == "eval/downstream/lambada_openai/ppl"]
    assert late and late[0].evidence["best_step"] == 73000 and late[0].start_step > 73000
    for model in ("pythia-410m", "pythia-410m-deduped", "pythia-1b-deduped", "pythia-1b-bf16"):
        assert found[model] == [], model


def test_ours_finds_more_synthetic_spikes_than_olmo_core_without_false_flags():
    for size, r in rr.spike_synthetic().items():
        assert r["false"]["gapwatch"] == 0 and r["hits"]["gapwatch"] >= r["hits"]["olmo_core"], size
    assert rr.spike_synthetic()[10]["hits"]["gapwatch"] > 1.2 * rr.spike_synthetic()[10]["hits"]["olmo_core"]


def test_docs_show_these_numbers(shared_data):
    assert rr.doc_sections() == rr.generated(), (
        "docs/detectors.md is out of date: run PYTHONPATH=. .venv/bin/python tests/monitor/detectors/real_results.py")
