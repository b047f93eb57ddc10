"""The connection layer every store module shares: which database a URL names, its engine tuned
per backend, this thread's transaction, the caches that map run and metric-key names to ids,
inserts of many rows (many rows a statement on SQLite) and reads of many rows as columns (in one
row on SQLite).

A command's store is `--store URL`, then `$GAPWATCH_STORE`, then a SQLite file in the per-user
data directory. `Store` is the public face; the modules that speak SQL for it (reader, metric
rows, alerts, the outbox, the watch service's reads) take a `Database`, so none of them needs the
`Store` and the package has no import cycle.
"""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import platformdirs
from sqlalchemy import Connection, Engine, Insert, create_engine, event, select, text
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from monitor.errors import GapwatchError
from monitor.store import tables

# --- which database a URL names -------------------------------------------------------------------
ENV_VAR = "GAPWATCH_STORE"


@dataclass(frozen=True)
class StoreURL:
    url: URL

    @property
    def backend(self) -> str:
        return self.url.get_backend_name()

    @property
    def sqlite_path(self) -> Path | None:
        if self.backend != "sqlite" or not self.url.database or self.url.database == ":memory:":
            return None
        return Path(self.url.database)

    def redacted(self) -> str:
        """The URL for messages, as the user would write it: never shows a password."""
        return self.url.set(drivername=self.backend).render_as_string(hide_password=True)


def default_sqlite_path() -> Path:
    return Path(platformdirs.user_data_dir("gapwatch")) / "gapwatch.db"


def resolve(url: str | None = None) -> StoreURL:
    raw = url or os.environ.get(ENV_VAR) or f"sqlite:///{default_sqlite_path()}"
    if "://" not in raw:
        # A bare path is the most common mistake and the most obvious intent.
        raw = f"sqlite:///{Path(raw).expanduser().resolve()}"
    try:
        parsed = make_url(raw)
    except ArgumentError:
        raise GapwatchError(f"store URL {raw!r} is not a URL (expected sqlite:///PATH or postgresql://HOST/DB)") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        parsed = parsed.set(drivername="sqlite")
    elif backend in ("postgresql", "postgres"):
        # psycopg 3 is the driver we ship; `postgresql://` alone would ask for psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    else:
        raise GapwatchError(
            f"store URL {parsed.render_as_string(hide_password=True)!r} uses {backend!r}; "
            "gapwatch stores are sqlite:///PATH or postgresql://HOST/DB"
        )
    return StoreURL(parsed)


# --- the engine, per backend ----------------------------------------------------------------------
# Writers wait this long for the single SQLite write lock before giving up. A writer holds it for
# one commit, so a wait this long means something is wrong (a stuck process), not contention.
SQLITE_BUSY_TIMEOUT_MS = 30_000
# PostgreSQL: fail fast on a dead server instead of the driver's default of waiting forever.
PG_CONNECT_TIMEOUT_S = 5
# TCP keepalives find a peer that vanished (a host gone, a NAT entry dropped) after idle +
# interval * count seconds instead of the kernel's default of hours, and tcp_user_timeout ends a
# connection whose sent data stays unacknowledged that long. Neither helps when a proxy on the
# path freezes with its sockets open (the kernel keeps acknowledging): the logging client keeps
# its own deadline for that (monitor/client/store_jobs.py).
PG_KEEPALIVE_OPTIONS = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                        "keepalives_count": 3, "tcp_user_timeout": 30_000}


def engine_for(store_url: StoreURL, read_only: bool = False, statement_timeout_s: float | None = None) -> Engine:
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

    return engine


# Rows of one multi-row statement on SQLite, at most (sqlite_rows); fewer where the connection
# bounds a statement's parameters lower (999 before SQLite 3.32).
SQLITE_STATEMENT_ROWS = 4096
_ONE_ROW = re.compile(r"VALUES\s*(\([?,\s]*\))")


def sqlite_rows(conn: Connection, sql: str, rows: Iterable[tuple]) -> int:
    """Run `sql`, an INSERT whose one `VALUES (?, ...)` row stands for each of `rows`, on SQLite,
    thousands of rows a statement; the number of rows it inserted or updated.

    sqlite3 lets go of the interpreter lock around each step of a statement and takes it back only
    after the switch interval when another thread runs Python (a trainer's loop): executemany,
    a step a row, wrote a few hundred rows a second beside such a thread (bench/RESULTS.md,
    "Client: a flat-out writer"); a multi-row statement steps once for thousands. The rows are
    taken a statement's worth at a time, so an iterator over columns makes no list of them."""
    one = _ONE_ROW.search(sql)
    width = one.group(1).count("?")
    raw = conn.connection.driver_connection
    per = max(1, min(SQLITE_STATEMENT_ROWS, raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
    rows = iter(rows)
    changed = 0
    cursor = raw.cursor()
    try:
        while params := list(itertools.chain.from_iterable(itertools.islice(rows, per))):
            statement = sql[:one.start(1)] + ", ".join([one.group(1)] * (len(params) // width)) + sql[one.end(1):]
            cursor.execute(statement, params)
            changed += cursor.rowcount
    finally:
        cursor.close()
    return changed


def insert_rows(conn: Connection, statement: str | Insert, rows: list[dict]) -> None:
    """Run an INSERT for each of `rows` ({parameter: value}): a table's `insert()`, or the text of
    one whose single VALUES row names its parameters (`:name`). On SQLite many rows a statement
    (sqlite_rows), elsewhere, or where the rows leave a column to its default (which SQLAlchemy
    fills in as it executes), SQLAlchemy's executemany."""
    if not rows:
        return
    if isinstance(statement, str):
        names, sql = re.findall(r":(\w+)", statement), re.sub(r":\w+", "?", statement)
    else:
        compiled = statement.compile(dialect=conn.dialect, column_keys=list(rows[0]))
        names, sql = compiled.positiontup, compiled.string
    if conn.dialect.name != "sqlite" or not set(names) <= rows[0].keys():
        conn.execute(text(statement) if isinstance(statement, str) else statement, rows)
        return
    sqlite_rows(conn, sql, (tuple(row[n] for n in names) for row in rows))


# A float as SQLite text that reads back to the same double: 21 significant digits, more than the
# 17 a double needs, so that SQLite's own rounding of the last ones cannot reach it
# (tests/monitor/store/test_fetch_columns.py reads back random bit patterns); NULL as NaN.
_SQLITE_FLOAT_TEXT = "CASE WHEN {0} IS NULL THEN 'nan' ELSE printf('%!.20e', {0}) END"


def fetch_columns(conn: Connection, query: str, params: Iterable, dtypes: list, order: int = 0) -> list[np.ndarray]:
    """The rows of `query`, a SELECT of numbers written with `?` marks, as one array per column of
    the given dtypes, sorted by their first `order` columns (its own ORDER BY only picks the rows
    a LIMIT keeps). A NULL reads as NaN, so only float columns may hold one.

    On SQLite the rows come back as one: each column joined into one text by group_concat.
    sqlite3 lets go of the interpreter lock at each row it steps and takes it back only after the
    switch interval when another thread runs Python (a dashboard worker drawing a figure), so a
    fetch a row at a time waited out a switch interval a row (bench/RESULTS.md, "SQLite reads
    beside a busy thread"). SQLite promises no order for group_concat, hence the sort here."""
    read = _sqlite_columns if conn.dialect.name == "sqlite" else _driver_columns
    out = read(conn, query, tuple(params), dtypes)
    if order and len(out[0]) > 1:
        at = np.lexsort(out[:order][::-1])
        out = [c[at] for c in out]
    return out


def _sqlite_columns(conn: Connection, query: str, params: tuple, dtypes: list) -> list[np.ndarray]:
    names = [f"c{i}" for i in range(len(dtypes))]
    joined = ", ".join(f"group_concat({_SQLITE_FLOAT_TEXT.format(n) if np.dtype(d).kind == 'f' else n})"
                       for n, d in zip(names, dtypes))
    raw = conn.connection.driver_connection
    try:
        n, *texts = raw.execute(f"WITH q({', '.join(names)}) AS ({query}) SELECT count(*), {joined} FROM q",
                                params).fetchone()
    except sqlite3.DataError:  # a column's text past SQLite's length limit (SQLITE_LIMIT_LENGTH)
        return _driver_columns(conn, query, params, dtypes)
    # str.split and a conversion by NumPy hold the interpreter lock; np.fromstring lets go of it
    # again and again, which beside a busy thread costs a switch interval each time.
    out = [np.array(t.split(",") if t else [], dtype=d) for t, d in zip(texts, dtypes)]
    if any(len(c) != n for c in out):  # group_concat leaves NULLs out: an integer column held one
        raise ValueError(f"an integer column of {query!r} holds NULL")
    return out


def _driver_columns(conn: Connection, query: str, params: tuple, dtypes: list) -> list[np.ndarray]:
    """The rows fetched through the driver's cursor (SQLAlchemy's handling of each row costs more
    than the query), transposed with zip in C, then converted a column at a time; a NULL becomes
    NaN."""
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(query if conn.dialect.paramstyle == "qmark" else query.replace("?", "%s"), params)
        rows = cursor.fetchall()
    finally:
        cursor.close()
    if not rows:
        return [np.empty(0, dtype=d) for d in dtypes]
    return [np.array(col, dtype=d) for col, d in zip(zip(*rows), dtypes)]


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
    return create_engine(store_url.url, pool_pre_ping=True, connect_args=connect_args)


# --- the connection layer -------------------------------------------------------------------------
class Database:
    def __init__(self, url: StoreURL, engine: Engine) -> None:
        self.url = url
        self.engine = engine
        self._local = threading.local()
        self._run_ids: dict[str, int] = {}
        self._key_ids: dict[str, int] = {}
        self._key_names: dict[int, str] = {}

    # --- transactions ----------------------------------------------------------------------------
    @contextmanager
    def atomic(self) -> Iterator[Connection]:
        """Every store call inside the block, on this thread, is one transaction."""
        if getattr(self._local, "conn", None) is not None:
            yield self._local.conn
            return
        ids_before = (dict(self._run_ids), dict(self._key_ids), dict(self._key_names))
        try:
            with self.engine.begin() as conn:
                self._local.conn = conn
                yield conn
        except BaseException:
            # Ids handed out inside a rolled-back transaction do not exist.
            self._run_ids, self._key_ids, self._key_names = ids_before
            raise
        finally:
            self._local.conn = None

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """A connection that writes: this thread's open transaction, or a new one."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection that reads: this thread's open transaction, or a new connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
        else:
            with self.engine.connect() as conn:
                yield conn

    def upsert(self, conn: Connection, table, rows: list[dict] | dict, index: list[str], update: list[str],
               where=None) -> None:
        """INSERT ... ON CONFLICT (index) DO UPDATE the `update` columns (only where the stored row
        meets `where`, when given), or DO NOTHING without any; a list of rows many a statement on
        SQLite (insert_rows)."""
        dialect = pg_dialect if conn.dialect.name == "postgresql" else sqlite_dialect
        stmt = dialect.insert(table)
        if update:
            stmt = stmt.on_conflict_do_update(
                index_elements=index, set_={c: getattr(stmt.excluded, c) for c in update}, where=where
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=index)
        if isinstance(rows, list) and where is None:
            insert_rows(conn, stmt, rows)
        else:
            conn.execute(stmt, rows)

    # --- run ids -------------------------------------------------------------------------------
    def run_id(self, conn: Connection, name: str) -> int:
        """The id of a run; an unknown run is the user's error, in one line."""
        run_id = self._run_ids.get(name)
        if run_id is None:
            run_id = conn.execute(select(tables.runs.c.id).where(tables.runs.c.name == name)).scalar()
            if run_id is None:
                raise GapwatchError(f"no run named {name!r} in {self.url.redacted()}")
            self._run_ids[name] = run_id
        return run_id

    def remember_run(self, name: str, run_id: int) -> None:
        self._run_ids[name] = run_id

    def forget_run(self, name: str) -> None:
        self._run_ids.pop(name, None)

    # --- metric key ids ------------------------------------------------------------------------
    def ensure_keys(self, conn: Connection, names: Iterable[str]) -> dict[str, int]:
        """Ids of these keys, creating those that are new."""
        names = list(names)
        missing = [n for n in set(names) if n not in self._key_ids]
        if missing:
            self.upsert(conn, tables.metric_keys, [{"name": n} for n in missing], index=["name"], update=[])
            self._load_keys(conn, tables.metric_keys.c.name.in_(missing))
        return {n: self._key_ids[n] for n in names}

    def key_ids(self, conn: Connection, names: Iterable[str]) -> dict[str, int]:
        """Ids of the keys that exist; unknown names are left out."""
        names = list(names)
        missing = [n for n in set(names) if n not in self._key_ids]
        if missing:
            self._load_keys(conn, tables.metric_keys.c.name.in_(missing))
        return {n: self._key_ids[n] for n in names if n in self._key_ids}

    def key_names(self, conn: Connection, key_ids: Iterable[int]) -> dict[int, str]:
        """Names of these key ids (and of any others known already)."""
        missing = [int(k) for k in set(key_ids) if k not in self._key_names]
        if missing:
            self._load_keys(conn, tables.metric_keys.c.id.in_(missing))
        return self._key_names

    def _load_keys(self, conn: Connection, condition) -> None:
        for key_id, name in conn.execute(
            select(tables.metric_keys.c.id, tables.metric_keys.c.name).where(condition)
        ):
            self._key_ids[name] = key_id
            self._key_names[key_id] = name
