"""One Slack message per incident: a bot token posts it once and edits it in place, with one
threaded reply per later notification; an incoming webhook, which cannot edit, posts follow-ups that
name the incident and its first message. Against real HTTP servers on 127.0.0.1 (never slack.com)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from monitor.alerting.config import AlertingConfig, IncidentConfig, SinkConfig
from monitor.alerting.incidents import IncidentTracker, Progress
from monitor.alerting.ledger import AlertLedger
from monitor.alerting.outbox import Outbox
from monitor.alerting.secrets import Secret
from monitor.alerting.sinks import build_sinks
from monitor.schema import Severity
from monitor.store import open_store, tables

from .helpers import FAST_DELIVERY, detection, drain, slack_config
from .slack_api import CHANNEL_ID, SlackApi

TOKEN = "xoxb-1234-5678-s3cr3tB0tT0ken"


@pytest.fixture
def api():
    server = SlackApi(TOKEN)
    yield server
    server.close()


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    s.ensure_run("r", reference="ref")
    yield s
    s.close()


def bot_config(api: SlackApi, channel: str = "#alerts") -> AlertingConfig:
    sink = SinkConfig("oncall", "slack_bot", Severity.INFO, token=Secret(TOKEN), token_env="SLACK_BOT_TOKEN",
                      channel=channel, api_url=api.base_url)
    return AlertingConfig(dashboard_url="http://dash.test:8050", incidents=IncidentConfig(resolve_after_steps=10),
                          delivery=FAST_DELIVERY, sinks=[sink])


def life_of_an_incident(store, config, outbox):
    """Opens (warning), escalates (critical), resolves; each step delivered before the next."""
    ledger, tracker = AlertLedger(store, config), IncidentTracker(config.incidents)
    open_alerts, resolved = ledger.incidents(["r"])
    steps = [([detection(start=100, end=120, severity=Severity.WARNING)], 120),
             ([detection(start=121, end=125, severity=Severity.CRITICAL)], 125),
             ([], 1000)]
    for found, judged in steps:
        ledger.record(tracker.apply(found, open_alerts, resolved, {("r", None): Progress(judged)}, time.time()))
        drain(outbox, lambda: outbox.pending_count() == 0)
    return ledger


def test_a_bot_token_edits_one_message_per_incident_and_replies_in_its_thread(store, api):
    config = bot_config(api)
    outbox = Outbox(store, build_sinks(config), config)
    ledger = life_of_an_incident(store, config, outbox)
    (message,) = api.top_level()
    assert [m for m, _ in api.calls] == ["chat.postMessage", "chat.update", "chat.postMessage",
                                         "chat.update", "chat.postMessage"]
    assert message["edits"] == 2 and "Resolved" in message["blocks"][0]["text"]["text"]
    ts = next(ts for ts, m in api.messages.items() if m is message)
    replies = [m["text"] for m in api.replies(ts)]
    assert len(replies) == 2 and replies[0].startswith("Escalated: warning -&gt; critical")
    assert replies[1].startswith("Resolved: ended at step 125")
    # The message is the incident now: its size, since when and its evidence, one line each.
    state = message["blocks"][2]["text"]["text"].splitlines()
    assert [line.split(":")[0] for line in state] == ["*Size*", "*Since*", "*Evidence*"]
    assert "steps 100–125" in state[0] and "step 100" in state[1] and "last_finite_value: `2.718`" in state[2]
    (alert,) = ledger.alerts("r")
    assert f"`{alert.incident_id}`" in message["blocks"][-1]["elements"][0]["text"]
    # The first post's channel (Slack's ID for the configured name) and ts are kept with it.
    with store.atomic() as conn:
        refs = conn.execute(select(tables.alert_outbox.c.message_ref).order_by(tables.alert_outbox.c.id)).scalars()
        assert [json.loads(r) if r else None for r in refs] == [{"channel": CHANNEL_ID, "ts": ts}, None, None]


def test_a_message_deleted_in_slack_is_posted_anew_and_the_new_one_is_edited(store, api):
    config = bot_config(api)
    outbox = Outbox(store, build_sinks(config), config)
    ledger, tracker = AlertLedger(store, config), IncidentTracker(config.incidents)
    open_alerts, resolved = ledger.incidents(["r"])
    ledger.record(tracker.apply([detection(severity=Severity.WARNING)], open_alerts, resolved,
                                {("r", None): Progress(120)}, time.time()))
    drain(outbox, lambda: outbox.pending_count() == 0)
    api.messages.clear()  # someone deleted the message
    ledger.record(tracker.apply([], open_alerts, resolved, {("r", None): Progress(1000)}, time.time()))
    drain(outbox, lambda: outbox.pending_count() == 0)
    (message,) = api.top_level()
    assert "Resolved" in message["blocks"][0]["text"]["text"] and message["edits"] == 0


def test_slack_api_errors_are_retried_and_the_token_never_reaches_the_store_or_logs(sqlite_url, api, caplog):
    caplog.set_level(logging.DEBUG)
    store = open_store(sqlite_url)
    store.ensure_run("r")
    config = bot_config(api)
    assert "s3cr3tB0tT0ken" not in repr(config) and "s3cr3tB0tT0ken" not in config.sinks[0].describe()
    outbox = Outbox(store, build_sinks(config), config)
    api.fail_with = (429, "ratelimited")
    ledger, tracker = AlertLedger(store, config), IncidentTracker(config.incidents)
    open_alerts, resolved = ledger.incidents(["r"])
    ledger.record(tracker.apply([detection()], open_alerts, resolved, {("r", None): Progress(120)}, time.time()))
    assert outbox.deliver_due().failed == 1 and api.top_level() == []
    with store.atomic() as conn:
        error = conn.execute(select(tables.alert_outbox.c.last_error)).scalar()
    assert error == "HTTP 429: ratelimited"
    api.fail_with = None
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert len(api.top_level()) == 1
    store.close()
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    for path in db.parent.glob(db.name + "*"):
        assert b"s3cr3tB0tT0ken" not in path.read_bytes(), path
    assert "s3cr3tB0tT0ken" not in caplog.text


def test_a_webhook_cannot_edit_so_each_later_message_names_the_incident_and_its_first(store, receiver):
    config = slack_config(receiver.url())
    outbox = Outbox(store, build_sinks(config), config)
    ledger = life_of_an_incident(store, config, outbox)
    (alert,) = ledger.alerts("r")
    bodies = [r.body for r in receiver.deliveries()]
    assert len(bodies) == 3
    first_key = receiver.deliveries()[0].key
    contexts = [b["blocks"][-1]["elements"][0]["text"] for b in bodies]
    assert all(f"`{alert.incident_id}`" in c for c in contexts)
    assert "follow-up" not in contexts[0]
    assert all(f"follow-up to its first message `{first_key}`" in c for c in contexts[1:])


def test_webhook_json_carries_the_incident_id_and_its_first_notification(store, receiver):
    hook = SinkConfig("ops", "webhook", Severity.INFO, url=Secret(receiver.url("/ops/tok3nPathSegment")))
    config = AlertingConfig(incidents=IncidentConfig(resolve_after_steps=10), delivery=FAST_DELIVERY, sinks=[hook])
    outbox = Outbox(store, build_sinks(config), config)
    ledger = life_of_an_incident(store, config, outbox)
    (alert,) = ledger.alerts("r")
    bodies = [r.body for r in receiver.deliveries()]
    assert [b["kind"] for b in bodies] == ["opened", "escalated", "resolved"]
    assert {b["incident_id"] for b in bodies} == {alert.incident_id} == {"r:instability#1"}
    assert bodies[0]["first_message"] is None
    assert all(b["first_message"]["idempotency_key"] == bodies[0]["idempotency_key"] for b in bodies[1:])


def test_a_store_from_before_message_refs_gains_the_column_when_opened(sqlite_url):
    import sqlite3

    from monitor.store import migrations

    open_store(sqlite_url).close()
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("ALTER TABLE alert_outbox DROP COLUMN message_ref")
        db.execute("UPDATE gapwatch_meta SET value = '3' WHERE key = 'schema_version'")
    with open_store(sqlite_url) as store:
        assert store.schema_version() == migrations.SCHEMA_VERSION >= 5
        store.ensure_run("r")
        config = slack_config("http://127.0.0.1:9/hook")
        ledger, tracker = AlertLedger(store, config), IncidentTracker(config.incidents)
        ledger.record(tracker.apply([detection()], {}, {}, {("r", None): Progress(120)}, time.time()))
        (row,) = store.outbox.pending(10)
        store.outbox.mark_delivered(row.id, time.time(), '{"channel": "C1", "ts": "1.2"}')
        assert store.outbox.message_ref(row.alert_id, "slack") == '{"channel": "C1", "ts": "1.2"}'
