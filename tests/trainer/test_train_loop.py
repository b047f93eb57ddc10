"""The training loop end to end on the tiny config: metrics, events, coverage, evals, no sync."""

import math

import numpy as np
import pytest
from jax._src import array as jax_array
from jax._src import config as jax_config

from monitor import schema
from monitor.schema import EventKind
from monitor.store import open_store
from tests.trainer.conftest import TEST_STEPS, run_inprocess, tiny_config
from trainer import sinks
from trainer.config import EvalConfig
from trainer.optim import schedule

STEPS = TEST_STEPS


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, caches):
    """One clean tiny run with held-out evals, GC and checkpoints, logged to a real SQLite store."""
    tmp = tmp_path_factory.mktemp("clean")
    config = tiny_config(caches).replace(
        checkpoint_every=10, gc_every=10, evals=EvalConfig(heldout_every=15, heldout_max_tokens=2_000))
    url = f"sqlite:///{tmp / 'store.db'}"
    result = run_inprocess(config, tmp, "clean", url)
    store = open_store(url)
    yield config, result, store.load_run("clean"), store.get_run("clean")
    store.close()


def test_every_core_metric_is_logged_each_step(clean_run):
    config, _, data, _ = clean_run
    scalars = data.scalars
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
    np.testing.assert_allclose(scalars[schema.PERF_MFU].dropna(),
                               perf * _flops_per_token(config) / config.peak_flops, rtol=1e-6)
    assert scalars[schema.TRAIN_LOSS].iloc[-5:].mean() < scalars[schema.TRAIN_LOSS].iloc[:5].mean()


def _flops_per_token(config):
    from trainer.flops import flops_per_token
    return flops_per_token(config.model, config.model.max_seq_len)


def test_clean_coverage_follows_the_plan(clean_run):
    config, _, data, run = clean_run
    s = data.scalars
    records = run["config"][schema.CONFIG_RECORDS_PER_EPOCH]
    steps = s.index.to_numpy()
    batch = config.data.global_batch_size
    assert np.array_equal(s[schema.DATA_CURSOR], steps * batch)
    np.testing.assert_allclose(s[schema.DATA_UNIQUE_FRACTION], steps * batch / records, rtol=1e-6)
    np.testing.assert_allclose(s[schema.DATA_EXPECTED_UNIQUE_FRACTION], steps * batch / records, rtol=1e-6)
    assert (s[schema.DATA_SEEN_2PLUS_FRACTION] == 0).all()
    np.testing.assert_allclose(s[schema.DATA_EPOCH], steps * batch / records, rtol=1e-6)


def test_run_config_and_events(clean_run):
    config, result, data, run = clean_run
    assert run["config"][schema.CONFIG_GLOBAL_BATCH_SIZE] == 8
    assert run["config"][schema.CONFIG_TOKENS_PER_STEP] == config.tokens_per_step == run["tokens_per_step"]
    assert run["status"] == "finished"
    events = data.events
    start = events[events.kind == EventKind.RUN_START.value].payload.iloc[0]
    assert start["versions"]["jax"] and start["versions"]["grain"] == "0.2.18"
    assert len(start["git_sha"]) == 40 and start["config"]["steps"] == STEPS
    assert list(events[events.kind == "checkpoint"].step) == [10, 20, 30]
    assert list(events[events.kind == "gc"].step) == [10, 20, 30]
    assert all(p["generation"] == 1 for p in events[events.kind == "gc"].payload)
    assert sorted(p.name for p in result.checkpoint_dir.iterdir()) == ["10", "20", "30"]


def test_heldout_loss_comes_from_evals_at_its_steps(clean_run):
    _, _, data, _ = clean_run
    loss = data.series(schema.heldout_key("stdlib", "loss"))
    assert list(loss.index) == [15, 30]
    assert loss.iloc[1] < loss.iloc[0] < math.log(512)  # learning, and better than uniform
    assert data.series(schema.heldout_key("stdlib", "stderr")).iloc[0] > 0
    evals = data.events[data.events.kind == "eval"]
    assert list(evals.step) == [15, 30] and evals.payload.iloc[0]["eval"] == "heldout"


@pytest.fixture
def fetch_probe(monkeypatch):
    """On CPU, JAX guards no device-to-host transfer (device memory is host memory). This probe
    applies the accelerator rule: a value fetched from a jax.Array on a thread whose transfer
    guard says 'disallow' is a host-device sync in the training loop. It records and raises."""
    violations = []
    original = jax_array.ArrayImpl._value

    def guarded(self):
        if jax_config.transfer_guard_device_to_host.value in ("disallow", "disallow_explicit"):
            violations.append(self.shape)
            raise RuntimeError("Disallowed device-to-host transfer on the training thread")
        return original.fget(self)

    monkeypatch.setattr(jax_array.ArrayImpl, "_value", property(guarded))
    return violations


def test_no_host_device_sync_in_the_step_loop(tiny, tmp_path, fetch_probe):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_inprocess(tiny.replace(checkpoint_every=10, gc_every=10), tmp_path, "nosync", url)
    assert fetch_probe == []
    with open_store(url) as store:  # the values did reach the store, fetched off the loop
        loss = store.load_run("nosync").series(schema.TRAIN_LOSS)
    assert len(loss) == STEPS and np.isfinite(loss).all()


def test_a_fetch_in_the_step_loop_is_caught(tiny, tmp_path, fetch_probe, monkeypatch):
    """The control: a sink that reads the loss on the training thread is a sync and is caught."""
    original_log = sinks.Sinks.log

    def syncing_log(self, step, metrics):
        float(metrics[schema.TRAIN_LOSS])
        original_log(self, step, metrics)

    monkeypatch.setattr(sinks.Sinks, "log", syncing_log)
    with pytest.raises(RuntimeError, match="Disallowed device-to-host"):
        run_inprocess(tiny, tmp_path, "sync", None)
    assert fetch_probe
