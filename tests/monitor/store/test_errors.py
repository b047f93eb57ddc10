"""Which failures of the store a writer retries (unreachable) and which it quarantines (never)."""

import sqlite3

import psycopg
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, PendingRollbackError

from monitor.store.errors import is_unreachable


@pytest.mark.parametrize("exc", [
    OperationalError("INSERT", {}, Exception("server closed the connection unexpectedly")),
    # A connection lost inside a transaction: the next statement on it says so, not the driver.
    PendingRollbackError("Can't reconnect until invalid transaction is rolled back"),
    # What the driver raises itself on the raw connection (COPY, the chunk merge).
    psycopg.OperationalError("the connection is lost"),
    sqlite3.OperationalError("database is locked"),
    TimeoutError("write deadline"),
])
def test_a_lost_or_busy_store_is_retried(exc):
    assert is_unreachable(exc)


@pytest.mark.parametrize("exc", [
    IntegrityError("INSERT", {}, Exception("violates check constraint")),
    ValueError("not a metric key"),
])
def test_a_batch_the_store_refuses_is_not(exc):
    assert not is_unreachable(exc)
