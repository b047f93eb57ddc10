"""Versioned schema: each migration moves the store from version N-1 to N, in order.

Opening a store applies the missing migrations in one transaction, so an older store is brought up
to date and a store written by a newer gapwatch is refused rather than misread. Migrations are
append-only: a released one is never edited, a change of schema is a new function at the end.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, inspect, select, text

from monitor.errors import GapwatchError
from monitor.store import chunks, derived, metrics_writer, tables


def _v1_initial(conn: Connection) -> None:
    tables.metadata.create_all(conn)


def _v2_chunks(conn: Connection) -> None:
    # A store made at version 1 by this code already has the table (create_all makes every table).
    tables.metric_chunks.create(conn, checkfirst=True)
    chunks.record_width(conn)
    metrics_writer.seal_all(conn)


def _v3_incident_stories(conn: Connection) -> None:
    # A store made at version 1 by this code already has the columns (create_all makes them).
    present = {c["name"] for c in inspect(conn).get_columns(tables.alerts.name)}
    for column in ("story", "members"):
        if column not in present:
            kind = "VARCHAR(64)" if column == "story" else "TEXT"
            conn.execute(text(f"ALTER TABLE {tables.alerts.name} ADD COLUMN {column} {kind}"))


def _v4_team_scale(conn: Connection) -> None:
    # A store made at an earlier version by this code already has the tables (create_all makes them).
    tables.derived_points.create(conn, checkfirst=True)
    derived.move_logged(conn)
    tables.watch_leases.create(conn, checkfirst=True)


def _v5_message_refs(conn: Connection) -> None:
    # A store made at an earlier version by this code already has the column (create_all makes it).
    present = {c["name"] for c in inspect(conn).get_columns(tables.alert_outbox.name)}
    if "message_ref" not in present:
        conn.execute(text(f"ALTER TABLE {tables.alert_outbox.name} ADD COLUMN message_ref TEXT"))


def _v6_zstd_chunks(conn: Connection) -> None:
    # New chunks are compressed with zstd, which an older gapwatch cannot read: the version makes
    # it refuse the store instead of failing on the first such chunk. And a chunk is now sealed
    # as soon as its last step is logged, where it used to wait for a later step: a series that
    # stopped on a chunk's last step has that chunk's rows moved out of the row table.
    metrics_writer.seal_all(conn)


def _v7_known_steps(conn: Connection) -> None:
    # A store made at an earlier version by this code already has the column (create_all makes it).
    # Detections stored before it have none: they are taken at their last step, as they were.
    present = {c["name"] for c in inspect(conn).get_columns(tables.detections.name)}
    if "known_step" not in present:
        conn.execute(text(f"ALTER TABLE {tables.detections.name} ADD COLUMN known_step BIGINT"))


# (version, what it does, function). The store's version is the last applied entry.
MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "runs, metrics with attempts, series marks, rollups, events, detections, alerts, outbox", _v1_initial),
    (2, "sealed step ranges of each series as compressed chunks; the row table keeps the tail", _v2_chunks),
    (3, "incidents by story: the alert's story and the findings of each detector that joined it", _v3_incident_stories),
    (4, "derived series (spike scores) apart from the logged rows; leases of several watch workers",
     _v4_team_scale),
    (5, "where a delivered notification lives at its receiver (a Slack message's channel and ts)", _v5_message_refs),
    (6, "chunks compressed with zstd (zlib ones stay as they are), each sealed once its last step is logged",
     _v6_zstd_chunks),
    (7, "the step at which each detection first held, so grouping takes findings in the order a watcher "
        "learns of them", _v7_known_steps),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]


def current_version(conn: Connection) -> int:
    if not inspect(conn).has_table(tables.meta.name):
        return 0
    row = conn.execute(
        select(tables.meta.c.value).where(tables.meta.c.key == "schema_version")
    ).first()
    return int(row[0]) if row else 0


def _set_version(conn: Connection, version: int) -> None:
    updated = conn.execute(
        tables.meta.update()
        .where(tables.meta.c.key == "schema_version")
        .values(value=str(version))
    ).rowcount
    if not updated:
        conn.execute(tables.meta.insert().values(key="schema_version", value=str(version)))


def upgrade(conn: Connection, migrations=None) -> int:
    """Apply every migration newer than the store; return the version reached.

    Runs inside the caller's transaction. On PostgreSQL an advisory lock serialises hosts that open
    a fresh store at the same moment; on SQLite the caller's BEGIN IMMEDIATE already does.
    """
    migrations = MIGRATIONS if migrations is None else migrations
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(724021)"))
    version = current_version(conn)
    latest = migrations[-1][0]
    if version > latest:
        raise GapwatchError(
            f"the store has schema version {version}, newer than this gapwatch understands "
            f"({latest}); upgrade gapwatch"
        )
    for number, _what, migrate in migrations:
        if number > version:
            migrate(conn)
            _set_version(conn, number)
            version = number
    return version
