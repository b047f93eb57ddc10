"""The watch service in-process on real detectors: incidents, restarts, new runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from monitor.alerting.sinks import build_sinks
from monitor.errors import GapwatchError
from monitor.store import open_store
from monitor.watch.config import WatchConfig
from monitor.judging.engine import DetectConfig
from monitor.watch.service import TARGET_REFRESH_POLLS, TargetSpec, WatchService

from .helpers import slack_config

STEPS = 6000
DIVERGED = (1000, 4000)  # steps in which the run's loss sits 0.3 nats above its reference


def losses(seed: int, diverge: bool) -> np.ndarray:
    steps = np.arange(STEPS)
    loss = 2.5 + 3.0 * np.exp(-steps / 500) + 0.02 * np.random.default_rng(seed).standard_normal(STEPS)
    if diverge:
        loss[DIVERGED[0]:DIVERGED[1]] += 0.3
    return loss


@pytest.fixture
def store(sqlite_url):
    s = open_store(sqlite_url)
    s.ensure_run("ref", status="imported")
    s.write_metrics("ref", pd.DataFrame({"step": np.arange(STEPS), "key": "train/loss", "value": losses(0, False)}))
    s.ensure_run("r", reference="ref")
    s.ensure_run("clean", reference="ref")
    yield s
    s.close()


def service(store, receiver, runs=("r", "clean"), **spec):
    config = WatchConfig(poll_interval_s=0.05, alerting=slack_config(receiver.url()),
                         detect=DetectConfig(detectors=["reference_divergence", "nonfinite"]))
    targets = TargetSpec(runs=tuple(runs), **spec)
    return WatchService(store, config, targets, sinks=build_sinks(config.alerting))


def feed(store, svc, lo, hi, chunk=500):
    """Log steps lo..hi of both runs chunk by chunk, the service polling after each chunk."""
    bad, good = losses(1, True), losses(2, False)
    for a in range(lo, hi, chunk):
        sl = slice(a, min(a + chunk, hi))
        store.write_metrics("r", pd.DataFrame({"step": np.arange(STEPS)[sl], "key": "train/loss", "value": bad[sl]}))
        store.write_metrics("clean", pd.DataFrame({"step": np.arange(STEPS)[sl], "key": "train/loss",
                                                   "value": good[sl]}))
        svc.poll()
        svc.outbox.deliver_due()


def kinds(receiver):
    return [r.body["blocks"][-1]["elements"][0]["text"].split(" · ")[1] for r in receiver.deliveries()]


def test_a_long_divergence_sends_one_message_and_one_resolution(store, receiver):
    svc = service(store, receiver)
    feed(store, svc, 0, STEPS)
    assert kinds(receiver) == ["opened", "resolved"]
    [alert] = svc.ledger.alerts("r")
    assert alert.detector == "reference_divergence" and alert.state == "resolved"
    assert abs(alert.start_step - DIVERGED[0]) <= 100 and abs(alert.end_step - (DIVERGED[1] - 1)) <= 100
    assert alert.evidence["direction"] == "above" and alert.evidence["delta"] == pytest.approx(0.3, abs=0.05)
    assert svc.ledger.alerts("clean") == [], "a run tied with its reference must stay silent"
    opened = receiver.deliveries()[0].body
    assert "/run/r?ref=ref&start=1000&end=" in opened["blocks"][-2]["elements"][0]["url"]


def test_state_survives_a_restart_of_the_service(store, receiver):
    first = service(store, receiver)
    feed(store, first, 0, 2500)
    assert kinds(receiver) == ["opened"]
    first.save_states()
    del first
    second = service(store, receiver)
    assert second.watchers == {}
    second.poll()
    watcher = next(iter(second.watchers.values()))
    assert watcher.cursor.key_last["train/loss"] == 2499, "the saved cursor was picked up"
    feed(store, second, 2500, STEPS)
    assert kinds(receiver) == ["opened", "resolved"]
    assert len(second.ledger.alerts("r")) == 1


def test_watching_all_runs_finds_runs_that_appear_later(store, receiver):
    svc = service(store, receiver, runs=(), all_runs=True)
    svc.poll()
    # The imported reference is watched too, alone: the detectors that need no reference judge it.
    assert {(t.run, t.reference) for t in svc._current} == {("r", "ref"), ("clean", "ref"), ("ref", None)}
    store.ensure_run("late")
    steps = np.arange(300)
    values = np.where((steps >= 100) & (steps < 110), np.nan, 2.0)
    store.write_metrics("late", pd.DataFrame({"step": steps, "key": "train/loss", "value": values}))
    for _ in range(TARGET_REFRESH_POLLS):
        svc.poll()
    svc.outbox.deliver_due()
    [alert] = svc.ledger.alerts("late")
    assert (alert.detector, alert.state, alert.start_step) == ("nonfinite", "resolved", 100)
    assert kinds(receiver) == ["opened", "resolved"]


@pytest.mark.parametrize("named", [False, True], ids=["--all", "--run"])
def test_a_run_whose_reference_is_not_in_the_store_is_still_judged_alone(store, receiver, caplog, named):
    """A reference named before it was imported (or misspelt, or removed): the run's NaN is still
    told, one warning says why nothing compares it, and once the reference is imported the run is
    judged against it from its start; with `--all` and with the run named alike."""
    steps = np.arange(STEPS)
    store.ensure_run("orphan", reference="not-imported-yet")
    bad = losses(1, True)
    bad[300:310] = np.nan
    store.write_metrics("orphan", pd.DataFrame({"step": steps, "key": "train/loss", "value": bad}))
    svc = service(store, receiver, runs=("orphan",)) if named else service(store, receiver, runs=(), all_runs=True)
    with caplog.at_level("WARNING", logger="gapwatch.watch"):
        for _ in range(3):
            svc.poll()
    missing = [r.message for r in caplog.records if "not-imported-yet" in r.message]
    assert missing == ["orphan: its reference 'not-imported-yet' is not in the store; judged by the detectors that "
                       "need no reference until it is"]
    assert [a.detector for a in svc.ledger.alerts("orphan")] == ["nonfinite"]
    # Imported now: the next poll compares the run with it, from its first step.
    store.ensure_run("not-imported-yet", status="imported")
    store.write_metrics("not-imported-yet", pd.DataFrame({"step": steps, "key": "train/loss",
                                                          "value": losses(0, False)}))
    svc.poll()
    assert ("orphan", "not-imported-yet") in {(t.run, t.reference) for t in svc.watchers}
    assert len(svc.watchers) == len(svc._current)  # the watcher without a reference is gone
    assert {a.detector for a in svc.ledger.alerts("orphan")} == {"nonfinite", "reference_divergence"}


def test_a_reference_named_on_the_command_line_must_be_in_the_store(store, receiver):
    with pytest.raises(GapwatchError, match="reference run 'typo' of 'r' is not in"):
        TargetSpec(runs=("r",), reference="typo").resolve(store)


def test_a_run_named_as_its_own_reference_is_refused(store):
    # Judged against itself a run always ties: refused as `runs set-reference`, `detect` and the report do.
    with pytest.raises(GapwatchError, match="run 'r' cannot be its own reference"):
        TargetSpec(runs=("r",), reference="r").resolve(store)


def test_a_run_whose_pass_crashed_is_named_and_judged_again_next_poll(store, receiver, monkeypatch, caplog):
    """The service keeps retrying a run whose pass failed (from its saved state) and lists it in
    `failed` with why until a pass succeeds; `watch --once` reads that list."""
    from monitor.judging.engine import DetectionEngine

    update = DetectionEngine.update
    crashes = iter([True])

    def crash_once(self, *args, **kwargs):
        if next(crashes, False):
            raise ValueError("bad row")
        return update(self, *args, **kwargs)

    monkeypatch.setattr(DetectionEngine, "update", crash_once)
    svc = service(store, receiver, runs=("r",))
    bad = losses(1, True)
    store.write_metrics("r", pd.DataFrame({"step": np.arange(STEPS), "key": "train/loss", "value": bad}))
    with caplog.at_level("ERROR", logger="gapwatch.watch"):
        svc.poll()
    assert svc.failed == {"r": "ValueError: bad row"}
    assert [r.message for r in caplog.records] == ["r: judging new rows failed; will retry from the saved state"]
    while svc.poll() or svc._behind:
        pass
    assert svc.failed == {} and [a.detector for a in svc.ledger.alerts("r")] == ["reference_divergence"]
