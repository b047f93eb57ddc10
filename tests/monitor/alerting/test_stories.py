"""One problem, one story: a fault that persists is one incident that never flaps, named by the
right explanation; a transient one resolves once its window ran clean; a clean seed sends nothing
(bench/quality/stories.py runs, watched in six pieces and judged whole)."""

from __future__ import annotations

import pytest

from bench import bench_stories
from bench.quality import stories

STEPS = 40_000


@pytest.fixture(scope="module")
def reference():
    return stories.reference(STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("scenario, story", [("memorizing", "memorization"), ("worse", "divergence")])
def test_a_persistent_fault_is_one_open_incident_that_never_resolves(tmp_path, reference, scenario, story):
    run = getattr(stories, scenario)(STEPS)
    sent, alerts = bench_stories.live(run, reference, tmp_path)
    assert [(a["story"], a["state"]) for a in alerts] == [(story, "open")]
    assert sent["opened"] == 1 and sent["resolved"] == 0 and sent["opened"] + sent["escalated"] <= 3
    (listed,) = bench_stories.whole(run, reference)
    assert listed.story == story and not listed.resolved


@pytest.mark.slow
def test_memorization_names_the_incident_and_carries_the_ties(tmp_path, reference):
    run = stories.memorizing(STEPS)
    _, (alert,) = bench_stories.live(run, reference, tmp_path)
    assert alert["detector"] == "memorization"
    evidence = bench_stories.whole(run, reference)[0].alert.evidence
    assert evidence["train_delta"] < 0 and evidence["heldout"] == "tied"
    assert evidence["downstream_z"] < 3 and "train loss below the reference" in evidence["also"]


@pytest.mark.slow
def test_a_spike_burst_opens_one_incident_and_resolves_it(tmp_path, reference):
    run = stories.spike_burst(STEPS)
    sent, alerts = bench_stories.live(run, reference, tmp_path)
    assert [(a["story"], a["state"]) for a in alerts] == [("instability", "resolved")]
    assert (sent["opened"], sent["resolved"]) == (1, 1)


@pytest.mark.slow
def test_a_clean_seed_opens_nothing(tmp_path, reference):
    run = stories.clean(STEPS)
    sent, alerts = bench_stories.live(run, reference, tmp_path)
    assert alerts == [] and sum(sent.values()) == 0
    assert bench_stories.whole(run, reference) == []
