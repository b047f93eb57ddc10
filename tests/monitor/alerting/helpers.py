"""Small builders shared by the alerting tests: configs pointed at the receiver, queued alerts."""

from __future__ import annotations

import time

from monitor.alerting.config import AlertingConfig, DeliveryConfig, IncidentConfig, SinkConfig
from monitor.alerting.incidents import IncidentTracker, Progress
from monitor.alerting.ledger import AlertLedger
from monitor.alerting.secrets import Secret
from monitor.schema import Detection, Severity

# Test-sized delivery: short timeouts and backoff so outages and recoveries take fractions of a second.
FAST_DELIVERY = DeliveryConfig(timeout_s=0.5, backoff_base_s=0.05, backoff_max_s=0.2, claim_lease_s=1.0)


def slack_config(url: str, *, extra_sinks=(), **sink_kw) -> AlertingConfig:
    sink = SinkConfig("slack", "slack", Severity.INFO, url=Secret(url), url_env="SLACK_WEBHOOK_URL", **sink_kw)
    return AlertingConfig(dashboard_url="http://dash.test:8050", incidents=IncidentConfig(resolve_after_steps=10),
                          delivery=FAST_DELIVERY, sinks=[sink, *extra_sinks])


def detection(run="r", metric="train/loss", start=100, end=120, severity=Severity.CRITICAL, detector="nonfinite",
              score=3.0):
    return Detection(run=run, detector=detector, metric=metric, start_step=start, end_step=end, peak_step=start + 1,
                     score=score, severity=severity, message=f"{metric} logged nan",
                     evidence={"n": end - start + 1, "last_finite_value": 2.71828, "band": 0.05})


def queue_incidents(store, config: AlertingConfig, detections: list[Detection], resolve_at: int | None = None):
    """Open an incident per detection (and resolve them all at step `resolve_at`) through the real
    tracker and ledger; returns the ledger."""
    ledger = AlertLedger(store, config)
    tracker = IncidentTracker(config.incidents)
    runs = sorted({d.run for d in detections})
    open_alerts, resolved = ledger.incidents(runs)
    last = max(d.end_step for d in detections)
    changes = tracker.apply(detections, open_alerts, resolved, {(r, None): Progress(last) for r in runs}, time.time())
    if resolve_at is not None:
        changes += tracker.apply([], open_alerts, resolved, {(r, None): Progress(resolve_at) for r in runs}, time.time())
    ledger.record(changes)
    return ledger


def drain(outbox, done, passes: int = 400, pause_s: float = 0.02) -> None:
    """Run delivery passes until `done()` holds; at most `passes` of them."""
    for _ in range(passes):
        outbox.deliver_due()
        if done():
            return
        time.sleep(pause_s)
    raise AssertionError(f"outbox not drained after {passes} passes")
