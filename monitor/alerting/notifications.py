"""What a sink is asked to send: a plain JSON dict built from an alert change, no secrets in it.

The outbox stores this dict; each sink renders it its own way at delivery (Block Kit for Slack, the
dict itself for a JSON webhook, a line for the console). Its `idempotency_key` is fixed when the
notification is written, so every retry of it, in any process, carries the same key.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import quote, urlencode

from monitor.alerting.incidents import Alert, AlertChange
from monitor.jsonutil import readable


def dashboard_link(base_url: str, run: str, start_step: int, end_step: int, reference: str | None = None) -> str:
    """`<base>/run/<name>?ref=<reference>&start=<step>&end=<step>`: the dashboard's view of the
    incident against the reference it was judged with. The range is the incident's own; the
    dashboard highlights it and shows context around it (app/dashboard/queries.link_range)."""
    query = {"ref": reference} if reference else {}
    query.update(start=start_step, end=end_step)
    return f"{base_url.rstrip('/')}/run/{quote(run, safe='')}?{urlencode(query)}"


def idempotency_key(alert: Alert, kind: str, sink: str) -> str:
    """Stable per (incident, kind, severity, growth escalation or name, sink). `opened_at` is in it
    because SQLite may hand a deleted alert's id to a new one; the id keeps it readable."""
    digest = hashlib.sha256(
        f"{alert.run}|{alert.story}|{alert.name}|{alert.opened_at!r}|{sink}".encode()
    ).hexdigest()[:20]
    return f"gapwatch-{alert.id}-{kind}-{alert.severity.value}-{alert.growth_escalations}-{digest}"


def build(change: AlertChange, sink: str, dashboard_url: str, reference: str | None,
          first_message: dict[str, Any] | None = None) -> dict[str, Any]:
    """`first_message`: the first notification of this incident to this sink (its idempotency key
    and when it was queued), for a later one that cannot edit it and so must name it."""
    alert = change.alert
    # Strict JSON whatever the sink: a score or evidence that is not finite is its text, as in the
    # detection it came from, so Slack, the console and a webhook all say "nan".
    return readable({
        "idempotency_key": idempotency_key(alert, change.kind, sink),
        "kind": change.kind,
        "alert_id": alert.id,
        "incident_id": alert.incident_id,
        "story": alert.story,
        "name": alert.name,
        "since_step": alert.start_step,
        "reason": change.reason,
        "run": alert.run,
        "attempt": alert.attempt,
        "reference": reference,
        "detector": alert.detector,
        "metric": alert.metric,
        "severity": alert.severity.value,
        "previous_severity": change.previous_severity.value if change.previous_severity else None,
        "start_step": alert.start_step,
        "end_step": alert.end_step,
        "peak_step": alert.peak_step,
        "score": alert.score,
        "message": alert.message,
        "evidence": alert.evidence,
        "opened_at": alert.opened_at,
        "resolved_at": alert.resolved_at,
        "dashboard_url": dashboard_link(dashboard_url, alert.run, alert.start_step, alert.end_step, reference),
        "first_message": first_message,
    })
