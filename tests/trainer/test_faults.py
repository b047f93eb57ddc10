"""Each fault runs its real code path in the tiny trainer and leaves its real signature."""

import dataclasses
import shutil

import numpy as np

from monitor import schema
from monitor.store import open_store
from tests.trainer.conftest import TEST_STEPS, run_inprocess
from trainer.faults import FaultConfig


def faulty(tiny, **fault):
    return tiny.replace(fault=FaultConfig(**fault), checkpoint_every=TEST_STEPS, gc_every=0)


def load(url: str, name: str):
    with open_store(url) as store:
        return store.load_run(name)


def test_loss_spike_multiplies_the_learning_rate_and_the_loss_jumps(tiny, tmp_path, clean_run):
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_inprocess(faulty(tiny, name="loss-spike", at_step=12, spike_factor=30.0, spike_steps=3),
                  tmp_path, "spike", url)
    spike, calm = load(url, "spike").scalars, clean_run.data.scalars
    ratio = spike[schema.OPTIM_LR] / calm[schema.OPTIM_LR]
    assert np.allclose(ratio.loc[12:14], 30.0) and np.allclose(ratio.drop(range(12, 15)), 1.0)
    # Identical until the spike (same seed and data), then the loss jumps above the calm run's.
    assert np.array_equal(spike[schema.TRAIN_LOSS].loc[:12], calm[schema.TRAIN_LOSS].loc[:12])
    jump = (spike[schema.TRAIN_LOSS] - calm[schema.TRAIN_LOSS]).loc[14:18].max()
    assert jump > 0.5


def test_nan_batch_poisons_the_run_from_its_step(tiny, tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_inprocess(faulty(tiny, name="nan", at_step=10), tmp_path, "nan", url)
    data = load(url, "nan")
    loss = data.series(schema.TRAIN_LOSS)
    assert np.isfinite(loss.loc[:9]).all()
    assert np.isnan(loss.loc[10:]).all()  # the NaN reaches the parameters and stays
    nonfinite = data.logged_nonfinite
    assert 10 in set(nonfinite[nonfinite.key == schema.TRAIN_LOSS].step)


def test_slow_host_stalls_its_steps(tiny, tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    stall = 0.4
    run_inprocess(faulty(tiny, name="slow-host", at_step=10, stall_every=5, stall_s=stall, slow_host=3),
                  tmp_path, "slow", url)
    step_time = load(url, "slow").series(schema.PERF_STEP_TIME_S)
    # A lower bound only: the host slept `stall` seconds inside these steps.
    assert (step_time.loc[[10, 15, 20, 25]] >= stall).all()


def test_double_sharding_runs_the_cursor_ahead_and_repeats_records(tiny, tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_inprocess(faulty(tiny, name="double-sharding"), tmp_path, "double", url)
    s = load(url, "double").scalars
    hosts, batch = tiny.data.data_hosts, tiny.data.global_batch_size
    # Each host's loader reads every 8th sampler slot: the cursor runs data_hosts times too fast.
    assert (np.diff(s[schema.DATA_CURSOR]) == batch * hosts).all()
    last = s.iloc[-1]
    assert last[schema.DATA_UNIQUE_FRACTION] < last[schema.DATA_EXPECTED_UNIQUE_FRACTION]
    assert last[schema.DATA_SEEN_2PLUS_FRACTION] > 0
    # Batches hold records read before, and their loss is measured apart from first reads.
    reread = s[schema.DATA_BATCH_REREAD_FRACTION]
    assert reread.iloc[0] == 0 and reread.iloc[-10:].mean() > reread.iloc[:10].mean()
    gap = s[schema.TRAIN_REREAD_LOSS_GAP]
    assert np.isfinite(gap).all() and (gap[(reread > 0) & (reread < 1)] != 0).all()


def test_resume_off_by_one_restores_the_model_one_step_ahead_of_the_data(tiny, tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    config = tiny.replace(checkpoint_every=10, gc_every=0)
    run_inprocess(config, tmp_path, "obo", url)
    # The process died after the step-10 checkpoint: later checkpoints never got written.
    for step in ("20", "30"):
        shutil.rmtree(tmp_path / "obo" / "checkpoints" / step)
    run_inprocess(config.replace(fault=FaultConfig(name="resume-off-by-one")), tmp_path, "obo", url)
    data = load(url, "obo")
    resume = data.events[data.events.kind == "resume"].payload.iloc[0]
    assert resume["checkpoint_step"] == 10 and resume["restored_step"] == 11
    assert resume["restored_data_position"] == 10 * tiny.data.global_batch_size
    assert resume["global_batch_size"] == tiny.data.global_batch_size
    second = data.repeats[data.repeats.key == schema.TRAIN_LOSS]
    assert sorted(set(second.step)) == list(range(12, 31))  # step 11 was never trained again
    # The resumed run trains batch 10 (0-based) at step 12, one step later than the first attempt
    # did at step 11: its data cursor shows it.
    cursor = data.scalars[schema.DATA_CURSOR]
    assert cursor.loc[12] == 11 * tiny.data.global_batch_size


def test_unknown_fault_is_one_clear_error():
    import pytest

    from monitor.errors import GapwatchError

    with pytest.raises(GapwatchError, match="unknown"):
        dataclasses.replace(FaultConfig(), name="bit-flip")
