"""What a caller outside the store catches when the database fails, without importing SQLAlchemy.

Only `monitor/store/` speaks SQL; the watch service, the outbox and the dashboard still need to
tell "the database is gone for a moment" from a bug, so the store names those failures here.
"""

from __future__ import annotations

import sqlite3

import psycopg
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    PendingRollbackError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

# The drivers' own "could not talk to the database" errors: the store runs COPY and the chunk
# merge on the driver connection, where SQLAlchemy does not wrap what the driver raises.
_DRIVER_UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, sqlite3.OperationalError)

DatabaseError = DBAPIError
"""The database or its driver failed a statement or a connection: refused, gone, locked, timed out
(SQLAlchemy's OperationalError is one of these)."""

StoreError = SQLAlchemyError
"""Anything the SQL layer raises, including a connection pool that timed out."""


def describe_db_error(exc: Exception) -> str:
    """The driver's first line, which names the real cause (refused, no such database, locked)."""
    orig = getattr(exc, "orig", exc)
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def is_unreachable(exc: BaseException) -> bool:
    """True when `exc` says the store could not be reached or did not answer in time (refused,
    dropped, cancelled by a timeout, locked): trying again later may succeed. False when the
    statement itself is wrong (bad data, a violated constraint), which no retry can fix."""
    if isinstance(exc, (OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError,
                        *_DRIVER_UNREACHABLE)):
        return True
    if isinstance(exc, PendingRollbackError):
        # The connection was lost inside a transaction; a new one can write the batch.
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (OSError, TimeoutError))
