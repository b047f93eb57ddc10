"""The alerts and their outbox in the store: an alert change and its notifications are written in
one transaction, so a crash leaves either both or neither, and no notification is ever lost.

A notification is what a sink is asked to send: a plain JSON dict built from an alert change, no
secrets in it. The outbox stores this dict; each sink renders it its own way at delivery (Block Kit
for Slack, the dict itself for a JSON webhook, a line for the console). Its `idempotency_key` is
fixed when the notification is written, so every retry of it, in any process, carries the same key.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import pandas as pd

from monitor.alerting.config import AlertingConfig
from monitor.alerting.incidents import (
    NOTIFYING,
    OPEN,
    ChangeKind,
    Alert,
    AlertChange,
    IncidentKey,
    Member,
)
from monitor.judging.settings_diff import as_payload, compare_settings
from monitor.jsonutil import dumps, readable
from monitor.schema import CleanRule, Detection, Severity

if TYPE_CHECKING:
    from monitor.store import Store



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


def notification(change: AlertChange, sink: str, dashboard_url: str, reference: str | None,
          first_message: dict[str, Any] | None = None, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """`first_message`: the first notification of this incident to this sink (its idempotency key
    and when it was queued), for a later one that cannot edit it and so must name it. `settings`:
    where the run's settings differ from the reference's (None when either records none)."""
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
        "settings": settings,
    })


class AlertLedger:
    def __init__(self, store: "Store", config: AlertingConfig, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.config = config
        self.clock = clock

    # --- reading -------------------------------------------------------------------------------
    def alerts(self, run: str | None = None, state: str | None = None) -> list[Alert]:
        """Alerts, oldest first, optionally of one run and/or in one state."""
        return stored_alerts(self.store, run, state)

    def incidents(self, runs: Iterable[str]) -> tuple[dict[IncidentKey, Alert], dict[IncidentKey, Alert]]:
        """The open alert and the latest resolved one of every incident key of these runs."""
        open_alerts: dict[IncidentKey, Alert] = {}
        resolved: dict[IncidentKey, Alert] = {}
        for alert in (_alert_from_row(row) for row in self.store.alerts.list(runs=list(runs))):
            if alert.state == OPEN:
                open_alerts[alert.key] = alert
            elif alert.key not in resolved or _latest_first(alert) >= _latest_first(resolved[alert.key]):
                resolved[alert.key] = alert
        return open_alerts, resolved

    # --- writing -------------------------------------------------------------------------------
    def record(self, changes: list[AlertChange], state: tuple[str, dict] | None = None,
               detections: list[Detection] | None = None, series: tuple[str, pd.DataFrame] | None = None,
               fence: Callable[[], None] | None = None) -> int:
        """Write the alerts, their notifications and (optionally) the detections behind them, the
        detector series of a run (spike scores) and a service state, all in one transaction; return
        the number of notifications queued. `fence` runs first in that transaction and raises to
        write nothing (a watch worker that no longer holds the run's lease)."""
        if not changes and state is None and not detections and series is None:
            return 0
        now = self.clock()
        queued = 0
        with self.store.atomic():
            if fence is not None:
                fence()
            if detections:
                self.store.write_detections(detections)
            if series is not None:
                self.store.write_derived(*series)
            written: set[int] = set()
            for change in changes:
                if id(change.alert) not in written:
                    self._write_alert(change.alert)
                    written.add(id(change.alert))
            opened_now = {id(c.alert) for c in changes if c.kind == ChangeKind.OPENED}
            for change in changes:
                if change.kind not in NOTIFYING:
                    continue
                if change.kind in (ChangeKind.ESCALATED, ChangeKind.UPDATED) and id(change.alert) in opened_now:
                    # Opened and escalated or renamed in one pass: the opening message says it all.
                    continue
                queued += self._enqueue(change, now)
            if state is not None:
                self.store.save_state(*state)
        return queued

    def _write_alert(self, alert: Alert) -> None:
        values = {
            "attempt": alert.attempt, "detector": alert.detector, "metric": alert.metric,
            "state": alert.state, "severity": alert.severity.value, "start_step": alert.start_step,
            "end_step": alert.end_step, "peak_step": alert.peak_step, "score": alert.score,
            "message": alert.message, "evidence": dumps(alert.evidence), "opened_at": alert.opened_at,
            "updated_at": alert.updated_at, "resolved_at": alert.resolved_at,
            "story": alert.story, "members": dumps(alert.members_to_dict()),
        }
        if alert.id is None:
            alert.id = self.store.alerts.insert(alert.run, values)
        else:
            self.store.alerts.update(alert.id, values)

    def _enqueue(self, change: AlertChange, now: float) -> int:
        alert = change.alert
        if change.kind == ChangeKind.RESOLVED:
            # A resolution goes wherever the incident was announced, and nowhere else.
            sinks = self.store.outbox.sinks_of(alert.id)
        elif self.config.silenced(alert, now):
            sinks = []
        else:
            sinks = [s.name for s in self.config.sinks if alert.severity.rank >= s.min_severity.rank]
        if not sinks:
            return 0
        run = self.store.get_run(alert.run)
        reference = run["reference"] if run is not None else None
        settings = self._settings(run, reference) if change.kind != ChangeKind.RESOLVED else None
        rows = []
        for sink in sinks:
            first = None
            if change.kind != ChangeKind.OPENED:
                queued = self.store.outbox.first_notification(alert.id, sink)
                first = {"idempotency_key": queued[0], "queued_at": queued[1]} if queued else None
            payload = notification(change, sink, self.config.dashboard_url, reference, first, settings)
            rows.append({
                "alert_id": alert.id, "sink": sink, "kind": change.kind, "payload": dumps(payload),
                "dedup_key": payload["idempotency_key"], "created_at": now, "tries": 0, "next_try_at": now,
            })
        self.store.outbox.add(rows)
        return len(rows)

    def _settings(self, run: dict | None, reference: str | None) -> dict[str, Any] | None:
        """Where the run's recorded settings differ from its reference's (settings_diff.as_payload):
        a learning rate or batch size unlike the reference's is the first thing the person told of
        a divergence rules out."""
        other = self.store.get_run(reference) if run is not None and reference is not None else None
        return as_payload(compare_settings(run["config"], other["config"])) if other is not None else None


def stored_alerts(store: "Store", run: str | None = None, state: str | None = None) -> list[Alert]:
    """The incidents as the store holds them (with their names and ids), oldest first."""
    return [_alert_from_row(row) for row in store.alerts.list(run, state)]


def _latest_first(alert: Alert) -> tuple[int, int]:
    """Orders the resolved alerts of one key: the next episode numbers on from the latest."""
    return (alert.episode or 0, alert.end_step)


def _alert_from_row(row) -> Alert:
    alert = Alert(
        id=row["id"], run=row["run_name"], attempt=int(row["attempt"]), detector=row["detector"],
        metric=row["metric"], state=row["state"], severity=Severity(row["severity"]),
        start_step=int(row["start_step"]), end_step=int(row["end_step"]), peak_step=int(row["peak_step"]),
        score=row["score"], message=row["message"], evidence=json.loads(row["evidence"]),
        opened_at=row["opened_at"], updated_at=row["updated_at"], resolved_at=row["resolved_at"],
        story=row.get("story") or row["detector"],
    )
    if row.get("members"):
        alert.members_from_dict(json.loads(row["members"]))
    else:
        # An alert written before incidents had members: it was one detector's, resolved by steps.
        member = Member(alert.detector, alert.metric, alert.detector, 1, CleanRule.JUDGED_STEPS.value,
                        alert.severity.value, alert.score, alert.start_step, alert.end_step, alert.peak_step,
                        alert.message, alert.evidence)
        alert.members, alert.told_score = {member.key: member}, alert.score
    return alert
