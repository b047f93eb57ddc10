"""`gapwatch watch` as a real process: SIGKILLed and restarted in the middle of a Slack outage,
it still delivers every notification exactly once, and never shows the webhook URL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import select

from monitor.store import open_store, tables

REPO = Path(__file__).resolve().parents[3]
SECRET_PART = "s3cr3tT0kenValue"
# Longest wait for any one thing a watch process should do (start-up, a delivery, exiting).
PROCESS_WAIT_S = 60.0

CONFIG = """
poll_interval_s: 0.2
incidents: {resolve_after_steps: 10, cooldown_steps: 100}
delivery: {timeout_s: 0.5, backoff_base_s: 0.1, backoff_max_s: 0.5, claim_lease_s: 2.0}
sinks:
  - {name: console, kind: console}
  - {name: slack, kind: slack, min_severity: info}
"""


class Watch:
    """One `gapwatch watch` process, its output in files."""

    def __init__(self, tmp: Path, store_url: str, hook: str, n: int) -> None:
        self.out, self.err = tmp / f"watch{n}.out", tmp / f"watch{n}.err"
        env = {**os.environ, "SLACK_WEBHOOK_URL": hook, "PYTHONUNBUFFERED": "1"}
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app", "watch", "--run", "r", "--store", store_url,
                 "--config", str(tmp / "watch.yaml"), "--detectors", "nonfinite"],
                cwd=REPO, env=env, stdout=out, stderr=err,
            )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(PROCESS_WAIT_S)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(PROCESS_WAIT_S)

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()


def wait_until(predicate, what: str, timeout: float = PROCESS_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def log_steps(store, lo: int, hi: int, nan: dict[str, tuple[int, int]]) -> None:
    steps = np.arange(lo, hi)
    frames = []
    for key in ("train/loss", "train/grad_norm", "perf/mfu"):
        values = np.full(len(steps), 0.4 if key == "perf/mfu" else 2.0)
        if key in nan:
            a, b = nan[key]
            values[(steps >= a) & (steps < b)] = np.nan
        frames.append(pd.DataFrame({"step": steps, "key": key, "value": values}))
    store.write_metrics("r", pd.concat(frames))


def slack_outbox(store):
    o = tables.alert_outbox.c
    with store.atomic() as conn:
        return conn.execute(select(o.dedup_key, o.kind, o.delivered_at, o.payload, o.last_error)
                            .where(o.sink == "slack").order_by(o.id)).all()


@pytest.fixture
def setup(tmp_path, store_url):
    (tmp_path / "watch.yaml").write_text(CONFIG)
    store = open_store(store_url)
    store.ensure_run("r")
    yield tmp_path, store_url, store
    store.close()


def test_killed_and_restarted_during_an_outage_delivers_each_notification_once(setup, receiver):
    tmp, url, store = setup
    hook = receiver.url()
    # Before the first start: a NaN incident on the loss that already ended, one on the grad norm still
    # open (beyond the first's cool-down: a new incident, not a recurrence).
    log_steps(store, 0, 1450, {"train/loss": (100, 110), "train/grad_norm": (1440, 1450)})
    receiver.fail(500)
    first = Watch(tmp, url, hook, 1)
    wait_until(lambda: len(receiver.all()) >= 3, "three failed sends (500)")
    first.kill()

    # While it is dead: the grad norm recovers, and the MFU logs NaN for a while and recovers.
    log_steps(store, 1450, 2900, {"perf/mfu": (2700, 2710)})
    receiver.fail(429, body="rate_limited", retry_after="0.3")
    seen = len(receiver.all())
    second = Watch(tmp, url, hook, 2)
    wait_until(lambda: len(slack_outbox(store)) == 6 and len(receiver.all()) >= seen + 3,
               "six queued notifications and three rate-limited sends")
    second.kill()

    receiver.down()  # connection refused while the third one starts
    third = Watch(tmp, url, hook, 3)
    wait_until(lambda: "not delivered" in third.err.read_text(), "a refused send")
    receiver.start()
    receiver.ok()
    wait_until(lambda: all(row.delivered_at for row in slack_outbox(store)), "every notification delivered")
    time.sleep(1.0)  # a duplicate, if any were coming, would arrive now
    assert third.stop() == 0

    rows = slack_outbox(store)
    delivered = Counter(r.key for r in receiver.deliveries())
    assert len(rows) == 6 and Counter(r.kind for r in rows) == {"opened": 3, "resolved": 3}
    assert delivered == Counter({r.dedup_key: 1 for r in rows}), "each notification exactly once"
    assert all(r.status != 200 for r in receiver.all()[:seen + 3])
    order = [r.key.split("-")[1:3] for r in receiver.deliveries()]
    for alert_id in {a for a, _ in order}:
        assert [k for a, k in order if a == alert_id] == ["opened", "resolved"]

    texts = [w.text() for w in (first, second, third)]
    assert "CRITICAL" in "".join(texts) and "RESOLVED" in "".join(texts)  # the console sink
    assert "HTTP 500" in texts[0] and "HTTP 429" in texts[1]
    for text in texts:
        assert SECRET_PART not in text and hook not in text
    assert "URL from $SLACK_WEBHOOK_URL" in texts[0]
    for row in rows:
        assert SECRET_PART not in row.payload and SECRET_PART not in (row.last_error or "")
    with store.atomic() as conn:
        for table in (tables.alerts, tables.service_state, tables.detections):
            for row in conn.execute(select(table)).all():
                assert SECRET_PART not in repr(tuple(row))
    if url.startswith("sqlite"):
        db = Path(url.removeprefix("sqlite:///"))
        for path in db.parent.glob(db.name + "*"):
            assert SECRET_PART.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_crash_between_slack_accepting_and_the_outbox_marking_resends_with_the_same_key(setup, receiver):
    tmp, url, store = setup
    log_steps(store, 0, 105, {"train/loss": (100, 105)})
    # Slack answers 503 until the trap is set: a first send that beat it would succeed normally.
    receiver.fail(503)
    first = Watch(tmp, url, receiver.url(), 1)
    wait_until(lambda: len(slack_outbox(store)) == 1, "the notification queued")
    receiver.accept_then_kill(first.proc.pid)
    wait_until(lambda: first.proc.poll() is not None, "the receiver killing the sender")
    assert len(receiver.deliveries()) == 1 and slack_outbox(store)[0].delivered_at is None
    receiver.ok()
    second = Watch(tmp, url, receiver.url(), 2)
    wait_until(lambda: slack_outbox(store)[0].delivered_at is not None, "the resend after the claim lease")
    assert second.stop() == 0
    accepted = receiver.deliveries()
    # Slack posted it twice: that is the one window HTTP leaves open. Both carry one idempotency key,
    # so a receiver that keeps keys shows it once.
    assert len(accepted) == 2 and accepted[0].key == accepted[1].key == slack_outbox(store)[0].dedup_key
    assert len({r.key for r in accepted}) == 1
