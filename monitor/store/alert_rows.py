"""The alerts table and its outbox, for the alert ledger and the delivery loop.

The ledger writes an alert change and its notifications inside one `store.atomic()` block, so
every function here joins this thread's open transaction when there is one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, select

from monitor.store import tables
from monitor.store.database import Database

_a, _o, _r = tables.alerts.c, tables.alert_outbox.c, tables.runs.c


class AlertRows:
    """Incidents: one row per (run, attempt, detector, metric) while it lasts."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def list(self, run: str | None = None, state: str | None = None,
             runs: list[str] | None = None) -> list[dict[str, Any]]:
        """Alert rows with their run's name as `run_name`, oldest first (of one run, or of `runs`)."""
        query = select(tables.alerts, _r.name.label("run_name")).join(tables.runs, _r.id == _a.run_id)
        if run is not None:
            query = query.where(_r.name == run)
        if runs is not None:
            query = query.where(_r.name.in_(list(runs)))
        if state is not None:
            query = query.where(_a.state == state)
        with self._db.tx() as conn:
            return [dict(row) for row in conn.execute(query.order_by(_a.id)).mappings().all()]

    def insert(self, run: str, values: dict[str, Any]) -> int:
        """A new alert of `run`; returns its id."""
        with self._db.tx() as conn:
            run_id = self._db.run_id(conn, run)
            return conn.execute(
                tables.alerts.insert().values(run_id=run_id, **values).returning(_a.id)
            ).scalar_one()

    def update(self, alert_id: int, values: dict[str, Any]) -> None:
        with self._db.tx() as conn:
            conn.execute(tables.alerts.update().where(_a.id == alert_id).values(**values))


class OutboxRows:
    """Notifications waiting for (or done with) delivery; `dedup_key` makes a rewrite a no-op."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Queue notifications; one whose dedup_key is queued already is left as it is."""
        with self._db.tx() as conn:
            self._db.upsert(conn, tables.alert_outbox, rows, index=["dedup_key"], update=[])

    def sinks_of(self, alert_id: int) -> list[str]:
        """The sinks an alert's notifications were queued for."""
        with self._db.tx() as conn:
            return [name for (name,) in conn.execute(select(_o.sink).distinct().where(_o.alert_id == alert_id))]

    def pending(self, limit: int, runs: list[str] | None = None) -> list:
        """Undelivered notifications (of these runs' alerts; None: every run's), oldest first: id,
        alert_id, sink, kind, payload, tries, next_try_at."""
        query = select(_o.id, _o.alert_id, _o.sink, _o.kind, _o.payload, _o.tries, _o.next_try_at)
        with self._db.tx() as conn:
            return conn.execute(
                self._of_runs(query, runs).where(_o.delivered_at.is_(None)).order_by(_o.id).limit(limit)
            ).all()

    def pending_count(self, runs: list[str] | None = None) -> int:
        query = select(func.count()).select_from(tables.alert_outbox)
        with self._db.tx() as conn:
            return conn.execute(self._of_runs(query, runs).where(_o.delivered_at.is_(None))).scalar_one()

    @staticmethod
    def _of_runs(query, runs: list[str] | None):
        if runs is None:
            return query
        return (query.join(tables.alerts, _a.id == _o.alert_id).join(tables.runs, _r.id == _a.run_id)
                .where(_r.name.in_(list(runs))))

    def earliest_due(self, sinks: list[str]) -> float | None:
        """When the earliest undelivered notification of these sinks is next due; None if none."""
        with self._db.tx() as conn:
            return conn.execute(
                select(func.min(_o.next_try_at)).where(and_(_o.delivered_at.is_(None), _o.sink.in_(sinks)))
            ).scalar()

    def claim(self, row_id: int, now: float, lease_s: float) -> bool:
        """Take a due notification for a lease, so a second delivery loop skips it."""
        with self._db.tx() as conn:
            claimed = conn.execute(
                tables.alert_outbox.update()
                .where(and_(_o.id == row_id, _o.delivered_at.is_(None), _o.next_try_at <= now))
                .values(tries=_o.tries + 1, next_try_at=now + lease_s)
            ).rowcount
        return claimed == 1

    def mark_delivered(self, row_id: int, at: float, message_ref: str | None = None) -> None:
        with self._db.tx() as conn:
            conn.execute(tables.alert_outbox.update().where(_o.id == row_id)
                         .values(delivered_at=at, last_error=None, message_ref=message_ref))

    def message_ref(self, alert_id: int, sink: str) -> str | None:
        """Where the receiver keeps the latest delivered message of this alert and sink that it
        told us about (see `SendResult.message_ref`); None if it told us of none."""
        with self._db.tx() as conn:
            return conn.execute(
                select(_o.message_ref).where(and_(_o.alert_id == alert_id, _o.sink == sink,
                                                  _o.message_ref.is_not(None)))
                .order_by(_o.id.desc()).limit(1)
            ).scalar()

    def first_notification(self, alert_id: int, sink: str) -> tuple[str, float] | None:
        """The idempotency key and queue time of the first notification of this alert and sink."""
        with self._db.tx() as conn:
            row = conn.execute(select(_o.dedup_key, _o.created_at).where(and_(_o.alert_id == alert_id, _o.sink == sink))
                               .order_by(_o.id).limit(1)).first()
        return (row[0], float(row[1])) if row is not None else None

    def mark_failed(self, row_id: int, next_try_at: float, error: str) -> None:
        with self._db.tx() as conn:
            conn.execute(tables.alert_outbox.update().where(_o.id == row_id)
                         .values(next_try_at=next_try_at, last_error=error))
