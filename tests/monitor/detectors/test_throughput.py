"""Throughput: goodput-convention stalls, periodic pauses, MFU / tokens-per-second drops."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.detectors.throughput import ThroughputDetector
from monitor.schema import (PERF_DEVICE_TOKENS_PER_S, PERF_MFU, PERF_STEP_TIME_S, PERF_TOKENS_PER_S, SYS_LOAD_PER_CPU,
                            Severity)

from .synth import perf, run

STEPS = np.arange(1, 6001)


def perf_run(name="r", **kw):
    return run(name, perf(STEPS, 1, **kw))


def test_clean_run_is_silent():
    assert ThroughputDetector().detect(perf_run()) == []
    assert ThroughputDetector().detect(perf_run(), perf_run("ref")) == []


def test_ideal_step_time_is_the_goodput_mean_of_normal_steps():
    r = perf_run()
    t = r.scalars[PERF_STEP_TIME_S]
    verdicts = ThroughputDetector(block_points=3000).step_verdicts(r, t)
    first = t.loc[:2999]  # the run's first block, judged by itself once complete
    med = np.median(first)
    mad = np.median(np.abs(first - med))
    assert verdicts["bound"].iloc[0] == pytest.approx(med + 3 * mad)
    assert verdicts["ideal"].iloc[0] == pytest.approx(first[first <= med + 3 * mad].mean())
    second = verdicts[verdicts["step"].between(3000, 5999)]
    assert (second["ideal"] == verdicts["ideal"].iloc[0]).all()  # judged by the block before



def test_stall_fires_with_severity_by_the_time_it_cost():
    r = perf_run()
    r.scalars.loc[4000, PERF_STEP_TIME_S] = 5.0  # ten times the 0.5 s ideal
    (d,) = ThroughputDetector().detect(r)
    assert (d.metric, d.start_step, d.severity) == (PERF_STEP_TIME_S, 4000, Severity.INFO)
    assert d.evidence["ratio"] == pytest.approx(10, rel=0.05) and d.evidence["lost_s"] == pytest.approx(4.5, rel=0.05)
    assert d.evidence["lost_share"] == pytest.approx(4.5 / 2004.5, rel=0.05)  # of 2,000 s run so far
    r.scalars.loc[4000, PERF_STEP_TIME_S] = 60.0  # a minute lost: 3% of the run so far
    (d,) = [d for d in ThroughputDetector().detect(r) if d.evidence["rule"] == "stall"]
    assert d.severity == Severity.WARNING


def test_a_stall_on_a_loaded_host_says_the_host_was_loaded():
    r = perf_run()
    r.scalars[SYS_LOAD_PER_CPU] = 0.6  # a quiet host...
    r.scalars.loc[4000, PERF_STEP_TIME_S] = 5.0
    (quiet,) = ThroughputDetector().detect(r)
    assert quiet.evidence["host_load_per_cpu"] == pytest.approx(0.6) and "loaded" not in quiet.message
    r.scalars.loc[3990:4010, SYS_LOAD_PER_CPU] = 2.5  # ...then five runnable tasks on two CPUs
    (busy,) = ThroughputDetector().detect(r)
    assert busy.evidence["host_load_per_cpu"] == pytest.approx(2.5)
    assert "the host was loaded (load average 2.5 per CPU" in busy.message
    # The same step time, the same verdict: the load explains the finding, it does not hide it.
    assert (busy.start_step, busy.severity, busy.score) == (quiet.start_step, quiet.severity, quiet.score)


def test_periodic_pauses_are_one_detection():
    r = perf_run()
    r.scalars.loc[STEPS[STEPS % 100 == 0], PERF_STEP_TIME_S] *= 1.3  # a collection every 100 steps
    (d,) = ThroughputDetector().detect(r)
    # Recognisable from the fifth pause on, judged from what came before (as the watch sees it).
    assert d.evidence["period_steps"] == 100 and d.evidence["n"] == 56 and d.start_step == 500
    assert d.severity == Severity.INFO and "periodic" in d.message


def test_a_slow_stretch_is_not_a_periodic_pause():
    r = perf_run()
    r.scalars.loc[2000:2060, PERF_STEP_TIME_S] *= 1.3  # a busy neighbour for 60 steps, not a recurring pause
    assert [d for d in ThroughputDetector().detect(r) if d.evidence.get("rule") == "periodic"] == []


def test_low_goodput_is_reported():
    r = perf_run()
    # two overlapping cadences of 3x steps: about a quarter of the time lost
    r.scalars.loc[STEPS[STEPS % 7 == 3], PERF_STEP_TIME_S] *= 3
    r.scalars.loc[STEPS[STEPS % 11 == 5], PERF_STEP_TIME_S] *= 3
    found = ThroughputDetector().detect(r)
    goodput = [d for d in found if d.metric == "perf/goodput"]
    assert len(goodput) == 1 and goodput[0].evidence["goodput"] < 0.8


def test_mfu_drop_against_own_baseline():
    r = perf_run()
    r.scalars.loc[3000:, PERF_MFU] *= 0.75
    (d,) = ThroughputDetector().detect(r)
    assert d.metric == PERF_MFU and 2900 <= d.start_step <= 3100
    assert d.evidence["delta"] == pytest.approx(-0.25, abs=0.02)


def test_one_devices_rate_is_judged_for_drops_as_the_runs_is():
    # A trainer that logs tokens per second per device only (torchtune, OLMo-core).
    r = perf_run()
    r.scalars[PERF_DEVICE_TOKENS_PER_S] = r.scalars.pop(PERF_TOKENS_PER_S) / 8
    r.scalars = r.scalars.drop(columns=[PERF_MFU])
    assert ThroughputDetector().detect(r) == []
    r.scalars.loc[3000:, PERF_DEVICE_TOKENS_PER_S] *= 0.7
    (d,) = ThroughputDetector().detect(r)
    assert d.metric == PERF_DEVICE_TOKENS_PER_S and 2900 <= d.start_step <= 3100


def test_slower_than_reference():
    ref = perf_run("ref")
    slow = perf_run()
    slow.scalars[PERF_TOKENS_PER_S] *= 0.8
    found = ThroughputDetector().detect(slow, ref)
    assert [d.metric for d in found] == [f"{PERF_TOKENS_PER_S}/vs_reference"]
    # Complete blocks only: step 6000 opens a block of its own.
    assert found[0].severity == Severity.INFO and found[0].start_step == 1 and found[0].end_step == 5999
