"""The connection layer every store module shares: the engine, this thread's transaction, and the
caches that map run and metric-key names to their ids.

`Store` is the public face; the modules that speak SQL for it (reader, metric rows, alerts, the
outbox, the watch service's reads) take a `Database`, so none of them needs the `Store` and the
package has no import cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect

from monitor.errors import GapwatchError
from monitor.store import tables
from monitor.store.url import StoreURL


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
        meets `where`, when given), or DO NOTHING without any."""
        dialect = pg_dialect if conn.dialect.name == "postgresql" else sqlite_dialect
        stmt = dialect.insert(table)
        if update:
            stmt = stmt.on_conflict_do_update(
                index_elements=index, set_={c: getattr(stmt.excluded, c) for c in update}, where=where
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=index)
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
