"""Memorization on our own trainer, end to end, on the demo preset: the double-sharded run trips the
memorization detector inside its batches (records read again score lower than first reads), and the
clean run of the same recipe, which never reads a record twice, gives it nothing to judge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.detectors.memorization_reread import MemorizationReread
from monitor.schema import TRAIN_REREAD_LOSS_GAP, Severity
from monitor.store import open_store

REPO = Path(__file__).resolve().parents[2]
USER_DIRS = ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memorization")
    url = f"sqlite:///{tmp / 'store.db'}"
    # Module-scoped, so the suite's per-test user folders are not set yet: give the runs their own.
    env = {**os.environ, **{var: str(tmp / var.lower()) for var in USER_DIRS}}
    # The two runs side by side: each is a single-threaded loop most of the time, so on two cores
    # the pair takes about what one run does.
    runs = [subprocess.Popen([sys.executable, "-m", "app", "train", "--config", "demo", "--run", run,
                              "--run-dir", str(tmp / run), "--store", url, "--seed", "0", *extra],
                             cwd=REPO, env=env, stdout=subprocess.DEVNULL)
            for run, extra in (("double", ["--fault", "double-sharding"]), ("clean", []))]
    assert [proc.wait(timeout=900) for proc in runs] == [0, 0], "both training runs finish"
    return url


def judge(url: str, run: str):
    with open_store(url) as store:
        data = store.load_run(run)
    return MemorizationReread().detect(data, None), MemorizationReread().not_judged(data, None)


def test_the_double_sharded_run_remembers_what_it_reads_again(store_url):
    found, _ = judge(store_url, "double")
    found = [d for d in found if d.metric == TRAIN_REREAD_LOSS_GAP]
    assert len(found) == 1
    d = found[0]
    assert d.severity == Severity.CRITICAL and d.evidence["z"] > 3 and d.evidence["gap"] > 0.1
    assert d.end_step >= 199 and "repeated training data" in d.message


def test_the_clean_run_has_nothing_to_judge(store_url):
    found, why = judge(store_url, "clean")
    assert found == [] and "clean first epoch" in why[0].reason
