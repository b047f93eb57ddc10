"""Connection settings that bound how long the store can hang a writer."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from monitor.store import DatabaseError, open_store


def test_postgres_connections_carry_keepalives_and_the_statement_timeout(pg_url):
    with open_store(pg_url, statement_timeout_s=1.5) as store:
        with store.engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "1500ms"
            assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "1500ms"
            params = conn.connection.driver_connection.info.get_parameters()
            assert params["keepalives"] == "1" and params["tcp_user_timeout"] == "30000"
            with pytest.raises(DatabaseError, match="canceling statement due to statement timeout"):
                conn.execute(text("SELECT pg_sleep(5)"))


def test_postgres_without_a_timeout_keeps_the_server_default(pg_url):
    with open_store(pg_url) as store, store.engine.connect() as conn:
        assert conn.execute(text("SHOW statement_timeout")).scalar() == "0"


def test_sqlite_busy_timeout_follows_the_statement_timeout(sqlite_url):
    with open_store(sqlite_url, statement_timeout_s=2.0) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 2000
