"""Outbox delivery against a real HTTP server on 127.0.0.1 that fails on command."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from monitor.alerting.config import SinkConfig
from monitor.alerting.outbox import Outbox
from monitor.alerting.secrets import Secret
from monitor.alerting.sinks import build_sinks
from monitor.schema import Severity
from monitor.store import open_store, tables

from .helpers import FAST_DELIVERY, detection, drain, queue_incidents, slack_config

SECRET_PART = "s3cr3tT0kenValue"


@pytest.fixture
def store(sqlite_url):
    s = open_store(sqlite_url)
    s.ensure_run("r", reference="ref")
    yield s
    s.close()


def outbox_rows(store):
    with store.atomic() as conn:
        return [dict(r) for r in conn.execute(select(tables.alert_outbox).order_by(tables.alert_outbox.c.id)).mappings()]


def make_outbox(store, config):
    return Outbox(store, build_sinks(config), config)


def test_server_errors_are_retried_until_delivered_once(store, receiver):
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection()])
    outbox = make_outbox(store, config)
    receiver.fail(500)
    drain(outbox, lambda: len(receiver.all()) >= 3)
    assert receiver.deliveries() == []
    row = outbox_rows(store)[0]
    assert row["delivered_at"] is None and row["tries"] >= 3 and row["last_error"].startswith("HTTP 500")
    receiver.ok()
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert len(receiver.deliveries()) == 1
    for _ in range(5):
        outbox.deliver_due()
    assert len(receiver.deliveries()) == 1


@pytest.mark.parametrize("retry_after", ["0.5", "1"])
def test_429_retry_after_is_honoured_even_when_fractional(store, receiver, retry_after):
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection()])
    outbox = make_outbox(store, config)
    receiver.fail(429, body="rate_limited", retry_after=retry_after)
    result = outbox.deliver_due()  # must not raise ValueError as slack_sdk's handler does on "0.5"
    assert result.failed == 1
    row = outbox_rows(store)[0]
    assert row["next_try_at"] - time.time() == pytest.approx(float(retry_after), abs=0.25)
    receiver.ok()
    outbox.deliver_due()
    assert receiver.deliveries() == [], "retried before Retry-After had passed"
    drain(outbox, lambda: outbox.pending_count() == 0)
    ok = receiver.deliveries()
    assert len(ok) == 1
    assert ok[0].at - receiver.all()[0].at >= float(retry_after) - 0.05


def test_timeout_and_connection_refused_are_retried(store, receiver):
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection()])
    outbox = make_outbox(store, config)
    receiver.hang(3.0)  # longer than the 0.5 s client timeout
    assert outbox.deliver_due().failed == 1
    assert "timed out" in outbox_rows(store)[0]["last_error"].lower()
    receiver.down()
    time.sleep(0.3)
    assert outbox.deliver_due().failed == 1
    assert "refused" in outbox_rows(store)[0]["last_error"].lower()
    receiver.start()
    receiver.ok()
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert len(receiver.deliveries()) == 1


def test_slack_error_status_is_checked_not_taken_for_success(store, receiver):
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection()])
    outbox = make_outbox(store, config)
    receiver.fail(404, body="no_service")  # slack_sdk returns this; it does not raise
    assert outbox.deliver_due().failed == 1
    row = outbox_rows(store)[0]
    assert row["delivered_at"] is None and row["last_error"] == "HTTP 404: no_service"


def test_a_sink_that_is_down_gets_one_probe_per_backoff_not_a_flood(store, receiver):
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection(metric=f"train/m{i}") for i in range(5)])
    outbox = make_outbox(store, config)
    receiver.fail(503)
    outbox.deliver_due()
    assert len(receiver.all()) == 1, "other notifications must wait while the sink is failing"
    receiver.ok()
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert Counter(r.key for r in receiver.deliveries()) == Counter({r["dedup_key"]: 1 for r in outbox_rows(store)})


def test_resolution_never_overtakes_its_opening(store, receiver):
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection()], resolve_at=500)
    outbox = make_outbox(store, config)
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert [r.body["blocks"][0]["text"]["text"].split(" ")[1] for r in receiver.deliveries()] == ["CRITICAL", "Resolved"]


def test_rate_limit_per_sink_holds_a_storm_back_and_loses_nothing(store, receiver):
    config = slack_config(receiver.url(), rate_per_minute=600, burst=2)  # 10/s after a burst of 2
    for i in range(6):
        store.ensure_run(f"r{i}")
    queue_incidents(store, config, [detection(run=f"r{i}") for i in range(6)])  # one incident per run
    outbox = make_outbox(store, config)
    first = outbox.deliver_due()
    assert (first.sent, first.held) == (2, 4)
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert len(receiver.deliveries()) == 6


def test_two_delivery_loops_on_one_store_send_each_notification_once(sqlite_url, receiver):
    config = slack_config(receiver.url())
    stores = [open_store(sqlite_url) for _ in range(2)]
    for i in range(8):
        stores[0].ensure_run(f"r{i}")
    queue_incidents(stores[0], config, [detection(run=f"r{i}") for i in range(8)])
    boxes = [make_outbox(s, config) for s in stores]
    for _ in range(50):
        for box in boxes:
            box.deliver_due()
        if boxes[0].pending_count() == 0:
            break
    keys = Counter(r.key for r in receiver.deliveries())
    assert len(keys) == 8 and set(keys.values()) == {1}
    for s in stores:
        s.close()


def test_block_kit_message_carries_run_detector_evidence_and_dashboard_link(store, receiver):
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection(start=1000, end=1400)])
    outbox = make_outbox(store, config)
    drain(outbox, lambda: outbox.pending_count() == 0)
    body = receiver.deliveries()[0].body
    text = json.dumps(body["blocks"])
    assert "NaN or Inf in the run on r" in body["blocks"][0]["text"]["text"]  # the incident's name
    assert "*Run*\\nr" in text and "*Reference*\\nref" in text and "*Metric*\\ntrain/loss" in text
    assert "`2.718`" in text and "`401`" in text  # evidence numbers, four significant digits
    button = body["blocks"][-2]["elements"][0]
    # The incident's own range against its reference: the dashboard highlights it, with context.
    assert button["url"] == "http://dash.test:8050/run/r?ref=ref&start=1000&end=1400"
    key = receiver.deliveries()[0].key
    assert body["metadata"]["event_payload"]["idempotency_key"] == key and key.startswith("gapwatch-1-opened-")


def test_generic_webhook_gets_the_json_with_an_idempotency_key(store, receiver):
    hook = SinkConfig("ops", "webhook", Severity.CRITICAL, url=Secret(receiver.url("/ops/tok3nPathSegment")))
    config = slack_config(receiver.url(), extra_sinks=[hook])
    queue_incidents(store, config, [detection(severity=Severity.CRITICAL), detection(metric="perf/mfu",
                                                                                     severity=Severity.WARNING)])
    outbox = make_outbox(store, config)
    drain(outbox, lambda: outbox.pending_count() == 0)
    ops = [r for r in receiver.deliveries() if r.path.startswith("/ops")]
    assert len(ops) == 1, "the warning is below the webhook's min_severity"
    assert ops[0].body["metric"] == "train/loss" and ops[0].body["evidence"]["last_finite_value"] == 2.71828
    assert ops[0].key == ops[0].body["idempotency_key"]


def test_a_score_or_evidence_that_is_not_finite_is_its_text_in_every_sink(store, receiver):
    hook = SinkConfig("ops", "webhook", Severity.INFO, url=Secret(receiver.url("/ops")))
    config = slack_config(receiver.url("/slack"), extra_sinks=[hook])
    found = detection(score=float("nan"))
    found.evidence.update(delta=float("inf"), deltas=[1.5, float("nan")])
    queue_incidents(store, config, [found])
    outbox = make_outbox(store, config)
    drain(outbox, lambda: outbox.pending_count() == 0)
    (ops,) = [r for r in receiver.deliveries() if r.path == "/ops"]
    # Strict JSON (a NaN literal would have parsed as a float), the same spelling as in Slack.
    assert ops.body["score"] == "nan" and ops.body["evidence"]["delta"] == "inf"
    assert ops.body["evidence"]["deltas"] == [1.5, "nan"]
    (slack,) = [r for r in receiver.deliveries() if r.path == "/slack"]
    text = json.dumps(slack.body["blocks"])
    assert "*Size*: nan times its band" in text
    assert "delta: `inf`" in text and "deltas: `[1.5, nan]`" in text


def test_console_sink_prints_one_line_per_notification(store, tmp_path):
    import io

    from monitor.alerting.config import AlertingConfig

    config = AlertingConfig(sinks=[SinkConfig("console", "console", Severity.INFO)])
    queue_incidents(store, config, [detection()], resolve_at=500)
    out = io.StringIO()
    outbox = Outbox(store, build_sinks(config, stream=out), config)
    outbox.deliver_due()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("CRITICAL") and lines[1].startswith("RESOLVED")
    assert "/run/r?ref=ref&start=100&end=120" in lines[0]


def test_slack_and_the_console_say_where_the_runs_settings_differ_from_the_references(store, receiver):
    import io

    store.ensure_run("ref", config={"lr": 6e-4, "batch_size": 32, "run_name": "a"})
    store.ensure_run("r", config={"lr": 3e-3, "batch_size": 32, "run_name": "<!channel>"})
    config = slack_config(receiver.url(), extra_sinks=[SinkConfig("console", "console", Severity.INFO)])
    queue_incidents(store, config, [detection()], resolve_at=500)
    out = io.StringIO()
    outbox = Outbox(store, build_sinks(config, stream=out), config)
    drain(outbox, lambda: outbox.pending_count() == 0)
    opened, resolved = (json.dumps(r.body["blocks"]) for r in receiver.deliveries())
    assert "*Settings* (run vs reference): lr 0.003 vs 0.0006, run_name &lt;!channel&gt; vs a" in opened
    assert "<!channel>" not in opened and "Settings" not in resolved
    lines = out.getvalue().splitlines()
    assert "(settings unlike ref's: lr 0.003 vs 0.0006, run_name <!channel> vs a)" in lines[0]
    assert "settings" not in lines[1]


def test_the_webhook_url_never_reaches_store_logs_or_errors(sqlite_url, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    store = open_store(sqlite_url)
    store.ensure_run("r")
    config = slack_config(receiver.url())
    assert SECRET_PART not in repr(config) and SECRET_PART not in str(config.sinks[0])
    queue_incidents(store, config, [detection()], resolve_at=500)
    outbox = make_outbox(store, config)
    receiver.fail(500, body=f"upstream said {receiver.url()}")  # even an error body echoing the URL
    outbox.deliver_due()
    assert outbox_rows(store)[0]["last_error"] == "HTTP 500: upstream said ***"
    receiver.down()
    time.sleep(0.3)
    outbox.deliver_due()
    receiver.start()
    receiver.ok()
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert len(receiver.deliveries()) == 2
    store.close()
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    for path in db.parent.glob(db.name + "*"):
        assert SECRET_PART.encode() not in path.read_bytes(), path
    assert SECRET_PART not in caplog.text
    assert "HTTP 500" in caplog.text  # the failure was logged, masked


def test_a_sink_that_raises_is_a_failed_try_not_a_dead_delivery_loop(store):
    import io

    from monitor.alerting.config import AlertingConfig
    from monitor.alerting.sinks.console import ConsoleSink

    config = AlertingConfig(sinks=[SinkConfig("console", "console", Severity.INFO)], delivery=FAST_DELIVERY)
    queue_incidents(store, config, [detection()])
    closed = io.StringIO()
    closed.close()
    outbox = Outbox(store, {"console": ConsoleSink("console", closed)}, config)
    assert outbox.deliver_due().failed == 1
    assert "closed file" in outbox_rows(store)[0]["last_error"]
    out = io.StringIO()
    outbox.sinks["console"] = ConsoleSink("console", out)
    drain(outbox, lambda: outbox.pending_count() == 0)
    assert "alert #1" in out.getvalue()


def test_the_fallback_text_is_escaped_like_the_blocks(store, receiver):
    evil = "<!channel> <https://evil|open me>"
    store.ensure_run(evil, reference="ref")
    config = slack_config(receiver.url())
    queue_incidents(store, config, [detection(run=evil)])
    outbox = make_outbox(store, config)
    drain(outbox, lambda: outbox.pending_count() == 0)
    body = receiver.deliveries()[0].body
    assert "<!channel>" not in body["text"] and "<https://" not in body["text"]
    assert "&lt;!channel&gt; &lt;https://evil|open me&gt;" in body["text"]
    assert "*Run*\\n&lt;!channel&gt; &lt;https://evil|open me&gt;" in json.dumps(body["blocks"])
