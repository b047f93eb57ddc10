"""The alerts and their outbox in the store: an alert change and its notifications are written in
one transaction, so a crash leaves either both or neither, and no notification is ever lost."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect

from monitor.alerting import notifications
from monitor.alerting.config import AlertingConfig
from monitor.alerting.incidents import (
    ESCALATED,
    NOTIFYING,
    OPEN,
    OPENED,
    RESOLVED_CHANGE,
    Alert,
    AlertChange,
    IncidentKey,
)
from monitor.jsonutil import dumps
from monitor.schema import Detection, Severity
from monitor.store import tables

if TYPE_CHECKING:
    from monitor.store import Store


class AlertLedger:
    def __init__(self, store: "Store", config: AlertingConfig, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.config = config
        self.clock = clock

    # --- reading -------------------------------------------------------------------------------
    def alerts(self, run: str | None = None, state: str | None = None) -> list[Alert]:
        """Alerts, oldest first, optionally of one run and/or in one state."""
        a, r = tables.alerts.c, tables.runs.c
        query = select(tables.alerts, r.name.label("run_name")).join(tables.runs, r.id == a.run_id)
        if run is not None:
            query = query.where(r.name == run)
        if state is not None:
            query = query.where(a.state == state)
        with self.store.atomic() as conn:
            rows = conn.execute(query.order_by(a.id)).mappings().all()
        return [_alert_from_row(row) for row in rows]

    def incidents(self, runs: Iterable[str]) -> tuple[dict[IncidentKey, Alert], dict[IncidentKey, Alert]]:
        """The open alert and the latest resolved one of every incident key of these runs."""
        open_alerts: dict[IncidentKey, Alert] = {}
        resolved: dict[IncidentKey, Alert] = {}
        for run in runs:
            for alert in self.alerts(run):
                if alert.state == OPEN:
                    open_alerts[alert.key] = alert
                elif alert.key not in resolved or alert.end_step >= resolved[alert.key].end_step:
                    resolved[alert.key] = alert
        return open_alerts, resolved

    # --- writing -------------------------------------------------------------------------------
    def record(self, changes: list[AlertChange], state: tuple[str, dict] | None = None,
               detections: list[Detection] | None = None) -> int:
        """Write the alerts, their notifications and (optionally) the detections behind them and a
        service state, all in one transaction; return the number of notifications queued."""
        if not changes and state is None and not detections:
            return 0
        now = self.clock()
        queued = 0
        with self.store.atomic() as conn:
            if detections:
                self.store.write_detections(detections)
            written: set[int] = set()
            for change in changes:
                if id(change.alert) not in written:
                    self._write_alert(conn, change.alert)
                    written.add(id(change.alert))
            opened_now = {id(c.alert) for c in changes if c.kind == OPENED}
            for change in changes:
                if change.kind not in NOTIFYING:
                    continue
                if change.kind == ESCALATED and id(change.alert) in opened_now:
                    # Opened and escalated in one pass: the opening message already has the severity.
                    continue
                queued += self._enqueue(conn, change, now)
            if state is not None:
                self.store.save_state(*state)
        return queued

    def _write_alert(self, conn: Connection, alert: Alert) -> None:
        values = {
            "attempt": alert.attempt, "detector": alert.detector, "metric": alert.metric,
            "state": alert.state, "severity": alert.severity.value, "start_step": alert.start_step,
            "end_step": alert.end_step, "peak_step": alert.peak_step, "score": alert.score,
            "message": alert.message, "evidence": dumps(alert.evidence), "opened_at": alert.opened_at,
            "updated_at": alert.updated_at, "resolved_at": alert.resolved_at,
        }
        if alert.id is None:
            values["run_id"] = self.store.run_id(alert.run)
            alert.id = conn.execute(
                tables.alerts.insert().values(**values).returning(tables.alerts.c.id)
            ).scalar_one()
        else:
            conn.execute(tables.alerts.update().where(tables.alerts.c.id == alert.id).values(**values))

    def _enqueue(self, conn: Connection, change: AlertChange, now: float) -> int:
        alert = change.alert
        if change.kind == RESOLVED_CHANGE:
            # A resolution goes wherever the incident was announced, and nowhere else.
            sinks = [
                name for (name,) in conn.execute(
                    select(tables.alert_outbox.c.sink).distinct().where(tables.alert_outbox.c.alert_id == alert.id)
                )
            ]
        elif self.config.silenced(alert, now):
            sinks = []
        else:
            sinks = [s.name for s in self.config.sinks if alert.severity.rank >= s.min_severity.rank]
        if not sinks:
            return 0
        reference = conn.execute(
            select(tables.runs.c.reference).where(tables.runs.c.id == self.store.run_id(alert.run))
        ).scalar()
        rows = []
        for sink in sinks:
            payload = notifications.build(change, sink, self.config.dashboard_url, reference)
            rows.append({
                "alert_id": alert.id, "sink": sink, "kind": change.kind, "payload": dumps(payload),
                "dedup_key": payload["idempotency_key"], "created_at": now, "tries": 0, "next_try_at": now,
            })
        dialect = pg_dialect if conn.dialect.name == "postgresql" else sqlite_dialect
        conn.execute(dialect.insert(tables.alert_outbox).on_conflict_do_nothing(index_elements=["dedup_key"]), rows)
        return len(rows)


def _alert_from_row(row) -> Alert:
    return Alert(
        id=row["id"], run=row["run_name"], attempt=int(row["attempt"]), detector=row["detector"],
        metric=row["metric"], state=row["state"], severity=Severity(row["severity"]),
        start_step=int(row["start_step"]), end_step=int(row["end_step"]), peak_step=int(row["peak_step"]),
        score=row["score"], message=row["message"], evidence=json.loads(row["evidence"]),
        opened_at=row["opened_at"], updated_at=row["updated_at"], resolved_at=row["resolved_at"],
    )
