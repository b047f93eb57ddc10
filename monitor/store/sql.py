"""SQLAlchemy engines tuned per backend, and the translation of connection failures into one line."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, event

from monitor.errors import GapwatchError
from monitor.store import tail_cache
from monitor.store.url import StoreURL

# Writers wait this long for the single SQLite write lock before giving up. A writer commits in
# milliseconds, so 30 s means something is wrong (a stuck process), not ordinary contention.
SQLITE_BUSY_TIMEOUT_MS = 30_000
# PostgreSQL: fail fast on a dead server instead of the driver's default of waiting forever.
PG_CONNECT_TIMEOUT_S = 5
# TCP keepalives find a peer that vanished (a host gone, a NAT entry dropped) in about
# idle + interval * count = 10 + 5 * 3 = 25 s instead of the kernel's two hours, and
# tcp_user_timeout ends a connection whose sent data stays unacknowledged for 30 s. Neither helps
# when a proxy on the path freezes with its sockets open (the kernel keeps acknowledging): the
# logging client keeps its own deadline for that (monitor/client/store_jobs.py).
PG_KEEPALIVE_OPTIONS = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                        "keepalives_count": 3, "tcp_user_timeout": 30_000}


def create(store_url: StoreURL, read_only: bool = False, statement_timeout_s: float | None = None) -> Engine:
    """`statement_timeout_s` bounds one statement: PostgreSQL cancels it (and ends a session left
    idle inside a transaction, releasing its locks); SQLite waits that long for the write lock."""
    if store_url.backend == "sqlite":
        return _sqlite_engine(store_url, read_only, statement_timeout_s)
    return _postgres_engine(store_url, read_only, statement_timeout_s)


def _sqlite_engine(store_url: StoreURL, read_only: bool, statement_timeout_s: float | None) -> Engine:
    path = store_url.sqlite_path
    if path is None:
        raise GapwatchError("an in-memory SQLite store cannot be shared between processes; give a file path")
    if read_only:
        if not path.exists():
            raise GapwatchError(f"no gapwatch store at {path}")
        url = f"sqlite:///file:{path}?mode=ro&uri=true"
    else:
        _check_writable(path)
        url = f"sqlite:///{path}"
    # Pooled connections: closing the last connection to a WAL database checkpoints and removes
    # the WAL file, so a connection per transaction would pay that on every write.
    busy_ms = SQLITE_BUSY_TIMEOUT_MS if statement_timeout_s is None else int(statement_timeout_s * 1000)
    engine = create_engine(url, connect_args={"timeout": busy_ms / 1000})

    @event.listens_for(engine, "connect")
    def _configure(dbapi_conn: sqlite3.Connection, _record) -> None:
        # Let SQLAlchemy's "begin" hook below issue BEGIN, not the driver's implicit one.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        if not read_only:
            # WAL: readers never block the writer and the writer never blocks readers.
            cur.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode loses at most the last transactions on power loss, never corrupts.
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        # A deferred transaction that later writes can fail with "database is locked" at once,
        # without waiting: a writer takes the write lock up front and waits its turn instead.
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return _forgetting_on_rollback(engine)


def _forgetting_on_rollback(engine: Engine) -> Engine:
    @event.listens_for(engine, "rollback")
    def _rollback(conn) -> None:
        # Rows a connection remembered writing (tail_cache.py) are gone with the transaction.
        tail_cache.clear(conn.info)

    return engine


def _check_writable(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GapwatchError(f"cannot create the store directory {path.parent}: {exc.strerror}") from None
    if path.exists() and not path.is_file():
        raise GapwatchError(f"store path {path} is not a file")
    probe = path if path.exists() else path.parent
    if not os.access(probe, os.W_OK):
        raise GapwatchError(f"store path {probe} is not writable")


def _postgres_engine(store_url: StoreURL, read_only: bool, statement_timeout_s: float | None) -> Engine:
    connect_args = {"connect_timeout": PG_CONNECT_TIMEOUT_S, "application_name": "gapwatch",
                    **PG_KEEPALIVE_OPTIONS}
    options = []
    if read_only:
        options.append("-c default_transaction_read_only=on")
    if statement_timeout_s is not None:
        ms = int(statement_timeout_s * 1000)
        options += [f"-c statement_timeout={ms}", f"-c idle_in_transaction_session_timeout={ms}"]
    if options:
        connect_args["options"] = " ".join(options)
    return _forgetting_on_rollback(create_engine(store_url.url, pool_pre_ping=True, connect_args=connect_args))
