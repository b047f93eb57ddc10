"""Alerts and their outbox rows are written together, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import func, select

from monitor.alerting.config import AlertingConfig, IncidentConfig, SilenceRule, SinkConfig
from monitor.alerting.incidents import IncidentTracker, Progress
from monitor.alerting.ledger import AlertLedger
from monitor.alerting.secrets import Secret
from monitor.judging.settings_diff import payload_text
from monitor.schema import Severity
from monitor.store import open_store, tables

from .helpers import detection


def config(silences=()):
    return AlertingConfig(
        incidents=IncidentConfig(resolve_after_steps=10),
        sinks=[SinkConfig("console", "console", Severity.INFO),
               SinkConfig("slack", "slack", Severity.WARNING, url=Secret("http://127.0.0.1:9/hook/x")),
               SinkConfig("pager", "webhook", Severity.CRITICAL, url=Secret("http://127.0.0.1:9/pager"))],
        silences=list(silences),
    )


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    s.ensure_run("r")
    yield s
    s.close()


def outbox(store):
    o = tables.alert_outbox.c
    with store.atomic() as conn:
        return conn.execute(select(o.sink, o.kind).order_by(o.id)).all()


def step(ledger, tracker, detections, last, runs=("r",)):
    open_alerts, resolved = ledger.incidents(runs)
    changes = tracker.apply(detections, open_alerts, resolved, {(r, None): Progress(last) for r in runs}, time.time())
    ledger.record(changes, state=("watch/r", {"last": last}), detections=detections)
    return changes


def test_severity_routes_and_resolution_goes_where_the_opening_went(store):
    cfg = config()
    ledger, tracker = AlertLedger(store, cfg), IncidentTracker(cfg.incidents)
    step(ledger, tracker, [detection(severity=Severity.WARNING)], 120)
    assert outbox(store) == [("console", "opened"), ("slack", "opened")]
    step(ledger, tracker, [detection(end=130, severity=Severity.CRITICAL)], 130)
    assert outbox(store)[2:] == [("console", "escalated"), ("slack", "escalated"), ("pager", "escalated")]
    step(ledger, tracker, [], 200)
    assert sorted(outbox(store)[5:]) == [("console", "resolved"), ("pager", "resolved"), ("slack", "resolved")]
    [alert] = ledger.alerts("r")
    assert (alert.state, alert.severity, alert.end_step) == ("resolved", Severity.CRITICAL, 130)
    assert store.load_state("watch/r") == {"last": 200}
    assert len(store.read_detections("r")) == 1
    assert int(store.list_runs()["open_alerts"].iloc[0]) == 0


def test_a_restarted_ledger_sees_the_open_incident_and_sends_nothing_new(store):
    cfg = config()
    step(AlertLedger(store, cfg), IncidentTracker(cfg.incidents), [detection()], 120)
    before = outbox(store)
    # A new process: fresh objects, the same detection again (re-judged after a crash).
    changes = step(AlertLedger(store, cfg), IncidentTracker(cfg.incidents), [detection()], 120)
    assert changes == [] and outbox(store) == before
    assert int(store.list_runs()["open_alerts"].iloc[0]) == 1


def test_silenced_alerts_are_kept_but_sent_nowhere(store):
    cfg = config([SilenceRule(run="r*", detector="nonfinite", max_severity=Severity.WARNING, reason="known")])
    ledger, tracker = AlertLedger(store, cfg), IncidentTracker(cfg.incidents)
    step(ledger, tracker, [detection(severity=Severity.WARNING)], 120)
    assert outbox(store) == [] and len(ledger.alerts("r")) == 1
    store.ensure_run("r2")
    step(ledger, tracker, [detection(run="r2", severity=Severity.CRITICAL)], 120, runs=("r2",))
    assert [k for _, k in outbox(store)] == ["opened"] * 3, "a critical alert is above the silence"
    step(ledger, tracker, [], 200, runs=("r", "r2"))
    assert len(outbox(store)) == 6, "the silenced alert's resolution goes nowhere either"


def test_expired_silence_no_longer_applies(store):
    cfg = config([SilenceRule(until=time.time() - 1)])
    step(AlertLedger(store, cfg), IncidentTracker(cfg.incidents), [detection()], 120)
    assert len(outbox(store)) == 3


def payloads(store):
    o = tables.alert_outbox.c
    with store.atomic() as conn:
        return [(sink, kind, json.loads(p)) for sink, kind, p in
                conn.execute(select(o.sink, o.kind, o.payload).order_by(o.id)).all()]


def test_a_notification_says_where_the_runs_settings_differ_from_its_references(store):
    store.ensure_run("ref", config={"optimizer": {"lr": 6e-4}, "batch_size": 32, "seed": 1, "n_layer": 12})
    store.ensure_run("cand", config={"optimizer": {"lr": 3e-3}, "batch_size": 32, "seed": 2, "n_layer": 12,
                                     "note": "x"})
    store.ensure_run("alone", config={"lr": 3e-3})
    store.set_reference("cand", "ref")
    cfg = AlertingConfig(incidents=IncidentConfig(resolve_after_steps=10),
                         sinks=[SinkConfig("console", "console", Severity.INFO)])
    ledger, tracker = AlertLedger(store, cfg), IncidentTracker(cfg.incidents)
    step(ledger, tracker, [detection(run="cand"), detection(run="alone")], 120, runs=("cand", "alone"))
    opened = {p["run"]: p for _, kind, p in payloads(store) if kind == "opened"}
    assert opened["cand"]["settings"] == {
        "given_differently": [{"setting": "optimizer.lr", "run": "0.003", "reference": "0.0006"},
                              {"setting": "seed", "run": "2", "reference": "1"}],
        "given_differently_count": 2, "recorded_by_one_only": 1, "same": 2}
    assert opened["alone"]["settings"] is None  # no reference to differ from
    assert payload_text(opened["cand"]["settings"]) == ("optimizer.lr 0.003 vs 0.0006, seed 2 vs 1; "
                                                         "1 recorded by one run only")
    step(ledger, tracker, [], 200, runs=("cand", "alone"))
    assert all(p["settings"] is None for _, kind, p in payloads(store) if kind == "resolved")
    store.ensure_run("twin", config={"optimizer": {"lr": 6e-4}, "batch_size": 32, "seed": 1, "n_layer": 12})
    store.set_reference("twin", "ref")
    step(ledger, tracker, [detection(run="twin")], 120, runs=("twin",))
    [twin] = [p for _, kind, p in payloads(store) if p["run"] == "twin"]
    assert payload_text(twin["settings"]) == "the same 4 as the reference"


def test_alert_and_outbox_are_one_transaction(store, monkeypatch):
    cfg = config()

    def crash(*_args):
        raise RuntimeError("crash after the alert and outbox rows were written")

    monkeypatch.setattr(store, "save_state", crash)
    ledger, tracker = AlertLedger(store, cfg), IncidentTracker(cfg.incidents)
    open_alerts, resolved = ledger.incidents(["r"])
    changes = tracker.apply([detection()], open_alerts, resolved, {("r", None): Progress(120)}, time.time())
    with pytest.raises(RuntimeError):
        ledger.record(changes, state=("watch/r", {"last": 120}))
    with store.atomic() as conn:
        assert conn.execute(select(func.count()).select_from(tables.alerts)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(tables.alert_outbox)).scalar_one() == 0
