"""Leases on what a watch worker judges, so that several `gapwatch watch --all` share one store.

A lease is a row (name, owner, expires_at): `run/<id>` for a run being judged, `worker/<owner>`
for a live worker (how many share the runs), `store` on SQLite (one worker per file).

Why rows with an expiry rather than session advisory locks: a session lock lives as long as one
connection, so it ties a run to one pooled connection (lost silently when the pool recycles it or
the server restarts, kept for as long as a partitioned host's TCP session lingers), and a write on
another connection cannot check it in its own transaction. A row is taken over one lease after its
holder stopped renewing it, whatever happened to the holder, and the transaction that records a
run's verdicts renews the run's lease first (`confirm`): a worker that lost it (paused, cut off)
learns so there and writes nothing, so a run is judged by one worker at a time. Times come from
the database's clock on PostgreSQL, so hosts with skewed clocks agree.
"""

from __future__ import annotations

import math
import random
import time

from sqlalchemy import Connection, and_, delete, func, literal_column, or_, select, text

from monitor.errors import GapwatchError
from monitor.store import tables
from monitor.store.database import Database

_l, _r = tables.watch_leases.c, tables.runs.c
STORE_LEASE = "store"


class LeaseLost(GapwatchError):
    """This worker no longer holds the run it was about to record verdicts for."""


class LeaseRows:
    def __init__(self, db: Database) -> None:
        self._db = db

    def balance(self, owner: str, runs: list[str], lease_s: float) -> tuple[set[str], str | None]:
        """Renew this worker's heartbeat and leases, give back runs beyond its fair share (the runs
        over the live workers) and take free or expired ones up to it. Returns the runs held now
        and, when another worker holds a SQLite store, that worker (and no run)."""
        with self._db.tx() as conn:
            now = _now(conn)
            until = now + lease_s
            self._take(conn, [f"worker/{owner}"], owner, now, until)
            if conn.dialect.name == "sqlite":
                holder = self._take(conn, [STORE_LEASE], owner, now, until).get(STORE_LEASE)
                if holder != owner:
                    return set(), holder
            ids = dict(conn.execute(select(_r.name, _r.id).where(_r.name.in_(list(runs)))).all())
            names = {f"run/{ids[r]}": r for r in runs if r in ids}
            rows = conn.execute(select(_l.name, _l.owner, _l.expires_at).where(_l.name.in_(list(names)))).all()
            mine = sorted(n for n, o, _ in rows if o == owner)
            taken = {n for n, o, e in rows if o != owner and e >= now}
            live = conn.execute(select(func.count()).where(and_(_l.name.like("worker/%"), _l.expires_at >= now))
                                ).scalar_one()
            share = math.ceil(len(names) / max(live, 1))
            if len(mine) > share:
                conn.execute(delete(tables.watch_leases).where(and_(_l.owner == owner, _l.name.in_(mine[share:]))))
                mine = mine[:share]
            free = [n for n in names if n not in taken and n not in mine]
            # In random order, so workers that start together do not all reach for the same runs.
            random.shuffle(free)
            held = self._take(conn, mine + free[:share - len(mine)], owner, now, until)
            return {names[n] for n, o in held.items() if o == owner}, None

    def confirm(self, run: str, owner: str, lease_s: float) -> None:
        """Renew the lease of `run`, inside the caller's transaction, or raise LeaseLost if this
        worker no longer holds it: the transaction then writes nothing. One statement, as it runs
        in every transaction that records a run's verdicts."""
        with self._db.tx() as conn:
            now = _now_sql(conn)
            name = f"run/{self._db.run_id(conn, run)}"
            renewed = conn.execute(tables.watch_leases.update()
                                   .where(and_(_l.name == name, _l.owner == owner, _l.expires_at >= now))
                                   .values(expires_at=now + lease_s)).rowcount
        if renewed != 1:
            raise LeaseLost(f"{run}: another watch worker holds it now; its verdicts are that worker's to record")

    def release(self, owner: str) -> None:
        """Give back every lease of this worker (a clean stop): the others take its runs at once."""
        with self._db.tx() as conn:
            conn.execute(delete(tables.watch_leases).where(_l.owner == owner))

    def holders(self) -> dict[str, str]:
        """Lease name -> owner of every unexpired lease (for tests and status lines)."""
        with self._db.tx() as conn:
            now = _now(conn)
            return dict(conn.execute(select(_l.name, _l.owner).where(_l.expires_at >= now)).all())

    def _take(self, conn: Connection, names: list[str], owner: str, now: float, until: float) -> dict[str, str]:
        """Take or renew each lease that is free, expired or this owner's; return name -> holder."""
        if not names:
            return {}
        # One statement, its rows in one order for every worker, so two that reach for the same
        # runs never deadlock.
        self._db.upsert(conn, tables.watch_leases,
                        [{"name": name, "owner": owner, "expires_at": until} for name in sorted(names)],
                        index=["name"], update=["owner", "expires_at"],
                        where=or_(_l.owner == owner, _l.expires_at < now))
        return dict(conn.execute(select(_l.name, _l.owner).where(_l.name.in_(names))).all())


def _now_sql(conn: Connection):
    """The database's clock as an SQL expression on PostgreSQL (no round trip of its own)."""
    if conn.dialect.name == "postgresql":
        return literal_column("extract(epoch FROM clock_timestamp())::float8")
    return time.time()


def _now(conn: Connection) -> float:
    if conn.dialect.name == "postgresql":
        return float(conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one())
    return time.time()
