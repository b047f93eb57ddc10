"""Data-loader invariants: the double-sharding cursor at the first logged step, coverage and its
Poisson(1) signature, epoch boundaries, a cursor one batch off after a resume."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.detectors.data_invariants import DataInvariants, poisson_shares
from monitor.schema import DATA_CURSOR, DATA_EPOCH, DATA_UNIQUE_FRACTION, Severity

from .synth import data_metrics, run

BATCH, RECORDS = 32, 64_000


def loader_run(steps, **kw):
    info = {"global_batch_size": BATCH, "records_per_epoch": RECORDS}
    return run("r", data_metrics(steps, BATCH, RECORDS, **kw), **info)


def test_poisson_one_is_37_37_26():
    unseen, once, more = poisson_shares(1.0)
    assert (round(unseen, 3), round(once, 3), round(more, 3)) == (0.368, 0.368, 0.264)


@pytest.mark.parametrize("first_step", [1, 10, 1000])
def test_double_sharding_fires_at_the_first_logged_step(first_step):
    steps = np.arange(first_step, first_step + 3000, 10)
    found = DataInvariants().detect(loader_run(steps, shards=32))
    cursor = [d for d in found if d.metric == DATA_CURSOR]
    assert len(cursor) == 1 and cursor[0].start_step == first_step
    assert cursor[0].severity == Severity.CRITICAL
    assert cursor[0].evidence["batches_per_step"] == pytest.approx(32, rel=0.05)
    assert "sharded" in cursor[0].message


def test_double_sharding_coverage_named_as_sampling_with_replacement():
    steps = np.arange(1, 2 * RECORDS // BATCH, 5)  # two epochs' worth of batches
    found = DataInvariants().detect(loader_run(steps, shards=32))
    (coverage,) = [d for d in found if d.metric == DATA_UNIQUE_FRACTION]
    assert "samples with replacement" in coverage.message and "Poisson" in coverage.message
    at_one_epoch = DataInvariants().detect(loader_run(np.array([RECORDS // BATCH]), shards=32))
    ev = [d for d in at_one_epoch if d.metric == DATA_UNIQUE_FRACTION][0].evidence
    assert ev["unique_fraction"] == pytest.approx(0.632, abs=1e-3) and ev["poisson_distance"] < 1e-9
    assert any(d.metric == DATA_EPOCH for d in found)  # epochs tick 32x too often


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("integer_epoch", [False, True])
def test_clean_loader_is_silent(offset, integer_epoch):
    steps = np.arange(1, 3 * RECORDS // BATCH)
    assert DataInvariants().detect(loader_run(steps, offset=offset, integer_epoch=integer_epoch)) == []


def test_cursor_one_batch_behind_after_a_resume():
    steps = np.arange(1, 3001)
    r = loader_run(steps)
    r.scalars.loc[1201:, DATA_CURSOR] -= BATCH  # model at step N+1, loader at batch N
    (d,) = [d for d in DataInvariants().detect(r) if d.metric == DATA_CURSOR]
    assert d.start_step == 1201 and d.evidence["deviation_batches"] == -1 and "out of step" in d.message


def test_coverage_against_logged_plan_without_batch_size():
    steps = np.arange(1, 4000)
    frame = data_metrics(steps, BATCH, RECORDS, shards=8)
    r = run("r", frame, records_per_epoch=RECORDS)  # global batch size unknown
    found = DataInvariants().detect(r)
    assert [d.metric for d in found] == [DATA_UNIQUE_FRACTION]  # no cursor or epoch verdicts
    assert DataInvariants().detect(run("r", frame)) == []  # no plan at all: nothing to check


def test_parameters_override_run_info():
    steps = np.arange(1, 500)
    r = run("r", data_metrics(steps, BATCH, RECORDS))
    assert DataInvariants().detect(r) == []
    found = DataInvariants(global_batch_size=16, records_per_epoch=RECORDS).detect(r)
    assert found and found[0].evidence["batches_per_step"] == pytest.approx(2.0)
