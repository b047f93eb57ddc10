"""What a caller outside the store catches when the database fails, without importing SQLAlchemy.

Only `monitor/store/` speaks SQL; the watch service, the outbox and the dashboard still need to
tell "the database is gone for a moment" from a bug, so the store names those failures here.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

DatabaseError = DBAPIError
"""The database or its driver failed a statement or a connection: refused, gone, locked, timed out
(SQLAlchemy's OperationalError is one of these)."""

StoreError = SQLAlchemyError
"""Anything the SQL layer raises, including a connection pool that timed out."""


def describe_db_error(exc: Exception) -> str:
    """The driver's first line, which names the real cause (refused, no such database, locked)."""
    orig = getattr(exc, "orig", exc)
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]
