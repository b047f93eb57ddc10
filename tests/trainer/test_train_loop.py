"""The training loop end to end on the tiny config: metrics, events, coverage, evals, no sync."""

import math

import numpy as np
import pytest

from monitor import schema
from monitor.schema import EventKind
from tests.trainer.conftest import DOWNSTREAM_LIMIT, TEST_STEPS, FetchProbe, run_inprocess
from trainer import sinks
from trainer.flops import flops_per_token
from trainer.optim import schedule

STEPS = TEST_STEPS


def test_every_core_metric_is_logged_each_step(clean_run):
    config, scalars = clean_run.config, clean_run.data.scalars
    assert list(scalars.index) == list(range(1, STEPS + 1))
    for key in schema.CORE_KEYS:
        assert key in scalars.columns, key
    for key in (schema.TRAIN_LOSS, schema.TRAIN_GRAD_NORM, schema.OPTIM_LR, schema.DATA_CURSOR):
        assert scalars[key].notna().all() and np.isfinite(scalars[key]).all(), key
    steps = scalars.index.to_numpy()
    assert np.array_equal(scalars[schema.TRAIN_TOKENS], steps * config.tokens_per_step)
    lr = np.asarray(schedule(config.optim, STEPS)(steps - 1))
    np.testing.assert_allclose(scalars[schema.OPTIM_LR], lr, rtol=1e-6)
    # Throughput only once the dispatch queue is full (not while compiling), then every step
    # that is not right after periodic work.
    perf = scalars[schema.PERF_TOKENS_PER_S].dropna()
    assert perf.index.min() > config.max_in_flight + 1 and len(perf) >= 10
    per_token = flops_per_token(config.model, config.model.max_seq_len)
    np.testing.assert_allclose(scalars[schema.PERF_MFU].dropna(), perf * per_token / config.peak_flops,
                               rtol=1e-6)
    assert scalars[schema.TRAIN_LOSS].iloc[-5:].mean() < scalars[schema.TRAIN_LOSS].iloc[:5].mean()
    # The result's steady step times (what the trainer benchmark takes medians of) are the steps
    # the logged throughput came from, and their mean is the result's throughput.
    times = clean_run.result.step_times
    assert len(times) == len(perf) and all(t > 0 for t in times)
    assert clean_run.result.tokens_per_s == pytest.approx(config.tokens_per_step / np.mean(times))


def test_clean_coverage_follows_the_plan(clean_run):
    s = clean_run.data.scalars
    records = clean_run.info["config"][schema.CONFIG_RECORDS_PER_EPOCH]
    seen = s.index.to_numpy() * clean_run.config.data.global_batch_size
    assert np.array_equal(s[schema.DATA_CURSOR], seen)
    for key in (schema.DATA_UNIQUE_FRACTION, schema.DATA_EXPECTED_UNIQUE_FRACTION,
                schema.DATA_SEEN_ONCE_FRACTION, schema.DATA_EPOCH):
        np.testing.assert_allclose(s[key], seen / records, rtol=1e-6, err_msg=key)
    assert (s[schema.DATA_SEEN_2PLUS_FRACTION] == 0).all()
    # Within one epoch no batch holds a record read before: nothing to compare, and nothing claimed.
    assert (s[schema.DATA_BATCH_REREAD_FRACTION] == 0).all() and (s[schema.TRAIN_REREAD_LOSS_GAP] == 0).all()


def test_run_config_and_events(clean_run):
    config, info, events = clean_run.config, clean_run.info, clean_run.data.events
    assert info["config"][schema.CONFIG_GLOBAL_BATCH_SIZE] == 8
    assert info["config"][schema.CONFIG_TOKENS_PER_STEP] == config.tokens_per_step == info["tokens_per_step"]
    assert info["status"] == "finished"
    start = events[events.kind == EventKind.RUN_START.value].payload.iloc[0]
    assert start["versions"]["jax"] and start["versions"]["grain"] == "0.2.18"
    assert len(start["git_sha"]) == 40 and start["config"]["steps"] == STEPS
    preflight = events[events.kind == "preflight"].payload.iloc[0]
    assert preflight["ok"] and preflight["max_abs_error"] < 1e-5
    assert list(events[events.kind == "checkpoint"].step) == [10, 20, 30]
    assert list(events[events.kind == "gc"].step) == [10, 20, 30]
    assert all(p["generation"] == 1 for p in events[events.kind == "gc"].payload)
    assert sorted(p.name for p in clean_run.result.checkpoint_dir.iterdir()) == ["10", "20", "30"]


def test_heldout_loss_comes_from_evals_at_its_steps(clean_run):
    data = clean_run.data
    loss = data.series(schema.heldout_key("stdlib", "loss"))
    assert list(loss.index) == [15, 30]
    assert loss.iloc[1] < loss.iloc[0] < math.log(512)  # learning, and better than uniform
    assert data.series(schema.heldout_key("stdlib", "stderr")).iloc[0] > 0
    evals = data.events[data.events.kind == "eval"]
    assert list(evals.step) == [15, 30, 30]
    assert [p["eval"] for p in evals.payload] == ["heldout", "heldout", "downstream"]


def test_downstream_evals_run_through_lm_eval_at_their_steps(clean_run):
    data = clean_run.data
    acc = data.series(schema.downstream_key("arc_easy", "acc"))
    assert list(acc.index) == [TEST_STEPS] and 0.0 <= acc.iloc[0] <= 1.0
    assert data.series(schema.downstream_key("arc_easy", "acc", "n")).iloc[0] == DOWNSTREAM_LIMIT


def test_no_host_device_sync_in_the_step_loop(clean_run):
    # The probe watched the whole run: nothing on the training thread fetched a device value
    # inside the per-step body, yet every loss reached the store (fetched on the logging thread).
    assert clean_run.fetches_in_loop == []
    assert np.isfinite(clean_run.data.series(schema.TRAIN_LOSS)).all()


def test_a_fetch_in_the_step_loop_is_caught(tiny, tmp_path, monkeypatch):
    """The control: a sink that reads the loss on the training thread is a sync and is caught."""
    probe = FetchProbe().install(monkeypatch)
    original_log = sinks.Sinks.log

    def syncing_log(self, step, metrics):
        float(metrics[schema.TRAIN_LOSS])
        original_log(self, step, metrics)

    monkeypatch.setattr(sinks.Sinks, "log", syncing_log)
    with pytest.raises(RuntimeError, match="Disallowed device-to-host"):
        run_inprocess(tiny.replace(preflight=False), tmp_path, "sync", None)
    assert probe.violations == [()]  # the scalar loss of step 1
