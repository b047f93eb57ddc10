"""Exact resume after a real SIGKILL, the --until-done supervisor, and resume on more devices."""

import subprocess

import numpy as np
import pytest

from monitor import schema
from monitor.store import open_store
from tests.trainer.conftest import REPO, cli, cli_env

# Checkpoints every 25 steps. The kill comes right after the step-50 save *started*: Orbax begins a
# save only once the previous one is committed, so step 25 is safe on disk and step 50 may or may
# not be (a kill in the middle of an asynchronous save). Either way >= 100 steps follow the restart.
STEPS = 150
KILL_AT = 50


@pytest.fixture(scope="module")
def runs(tmp_path_factory, caches):
    tmp = tmp_path_factory.mktemp("resume")
    url = f"sqlite:///{tmp / 'store.db'}"
    env = cli_env(caches)
    common = ["--config", "tiny", "--steps", str(STEPS), "--store", url, "--quiet"]
    straight = subprocess.run(cli(*common, "--run", "straight", "--run-dir", str(tmp / "straight")),
                              env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert straight.returncode == 0, straight.stderr[-2000:]
    killed = subprocess.run(cli(*common, "--run", "killed", "--run-dir", str(tmp / "killed"),
                                "--kill-at-step", str(KILL_AT), "--until-done", "--backoff", "0.1"),
                            env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert killed.returncode == 0, killed.stderr[-2000:]
    store = open_store(url)
    yield store.load_run("straight"), store.load_run("killed"), killed.stderr, url, tmp, env
    store.close()


@pytest.mark.slow
def test_sigkilled_run_resumes_with_exactly_the_same_losses(runs):
    straight, killed, stderr, *_ = runs
    assert "exited with code 137" in stderr  # a real SIGKILL, seen by the supervisor
    resume = killed.events[killed.events.kind == "resume"].payload.iloc[0]
    restored = resume["checkpoint_step"]
    assert restored in (25, 50) and resume["restored_step"] == restored
    assert resume["restored_data_position"] == restored * 8
    assert STEPS - restored >= 99
    for key in (schema.TRAIN_LOSS, schema.TRAIN_GRAD_NORM, schema.DATA_UNIQUE_FRACTION):
        a, b = straight.series(key), killed.series(key)
        assert list(a.index) == list(b.index) == list(range(1, STEPS + 1))
        assert np.array_equal(a.to_numpy(), b.to_numpy()), key  # delta 0.000, bit for bit
    # Steps the first process logged before dying were logged again by the second, identically.
    again = killed.repeats[killed.repeats.key == schema.TRAIN_LOSS]
    assert set(again.step) <= set(range(restored + 1, KILL_AT + 1))
    for step, rows in again.groupby("step"):
        assert rows.value.nunique() == 1 and rows.value.iloc[0] == straight.series(schema.TRAIN_LOSS)[step]


def test_restart_is_an_event_with_the_exit_code(runs):
    _, killed, *_ = runs
    restart = killed.events[killed.events.kind == "restart"]
    assert len(restart) == 1 and restart.payload.iloc[0]["exit_code"] == 137
    assert sorted(set(killed.events.attempt)) == [1, 2]


@pytest.mark.slow
def test_resume_on_eight_devices_continues_the_same_data(runs):
    straight, _, _, url, tmp, env = runs
    # Copy the straight run's step-125 state into a new run directory and finish it on 8 devices
    # (XLA_FLAGS=--xla_force_host_platform_device_count=8 through --devices): one record a device.
    import shutil

    target = tmp / "wider" / "checkpoints"
    target.mkdir(parents=True)
    shutil.copytree(tmp / "straight" / "checkpoints" / "125", target / "125")
    done = subprocess.run(cli("--config", "tiny", "--steps", str(STEPS), "--store", url, "--quiet",
                              "--run", "wider", "--run-dir", str(tmp / "wider"), "--devices", "8"),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open_store(url) as store:
        wider = store.load_run("wider")
    assert wider.events[wider.events.kind == "resume"].payload.iloc[0]["devices"] == 8
    steps = list(range(126, STEPS + 1))
    # The same records in the same order: coverage and cursor match exactly...
    for key in (schema.DATA_CURSOR, schema.DATA_UNIQUE_FRACTION):
        assert np.array_equal(wider.series(key).loc[steps], straight.series(key).loc[steps]), key
    # ...and the loss matches up to the order of the cross-device sum.
    np.testing.assert_allclose(wider.series(schema.TRAIN_LOSS).loc[steps],
                               straight.series(schema.TRAIN_LOSS).loc[steps], atol=2e-3)
