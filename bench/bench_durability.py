"""Durability of the logging client under faults: rows confirmed, lost and stored twice.

A child process logs 10 metrics a step at 200 steps/s through `Monitor` and calls `flush()` every
0.5 s; each flush that returns True *confirms* every row logged before it. A fault hits the child
or its store; afterwards a fresh Monitor on the same spool replays whatever was left (as the next
process on the host would) and the store is read back.

* rows lost: confirmed rows the store does not hold (the promise: 0).
* duplicates: rows stored twice, under two attempts (the promise: 0).
* tail lost: logging after the last stored step, in seconds, for SIGKILL (the promise: at most
  about one flush interval, 0.5 s here; other faults end in close(), which loses nothing).
  "sigkill in partition" kills the child 3 s into a partition, then thaws it.
* slowest flush: the longest a flush() kept the training loop waiting.

Faults: SIGKILL 3 s in; SIGTERM 3 s in (the client's handler closes it); for PostgreSQL a clean
server stop (`pg_ctl -m fast`) and a partition (a loopback proxy freezing traffic with its sockets
open), each 2 s in for 5 s; for SQLite another process holding the write lock 2 s in for 5 s.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

from bench.results import record, table
from monitor.client import Monitor, MonitorSettings
from monitor.store import open_store
from tests.monitor.client.partition_proxy import PartitionProxy
from tests.monitor.client.private_postgres import PrivatePostgres

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
RATE = 200
KEYS = 10
FLUSH_EVERY_S = 0.5
INTERVAL_S = 0.5
RUN_S = 10.0
FAULT_AT_S, FAULT_FOR_S, KILL_AT_S = 2.0, 5.0, 3.0

CHILD = """
import sys, time
from pathlib import Path
from monitor.client import Monitor, MonitorSettings
url, spool, seconds, interval = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
mon = Monitor("trial", store=url, settings=MonitorSettings(flush_interval_s=interval, spool_dir=spool))
keys = [f"train/m{i}" for i in range(10)]
step, began = 0, time.monotonic()
due, next_flush = began, began + 0.5
while time.monotonic() < began + seconds:
    mon.log(step, {k: 1.0 for k in keys})
    print("s", step, flush=True)
    if time.monotonic() >= next_flush:
        t = time.monotonic()
        ok = mon.flush()
        print("c" if ok else "f", step, time.monotonic() - t, flush=True)
        next_flush += 0.5
    step += 1
    due += 1 / 200
    time.sleep(max(0.0, due - time.monotonic()))
mon.close()
print("closed", flush=True)
"""


class Child:
    """The logging child, with what it reported read on a thread of our own."""

    def __init__(self, url: str, spool: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, url, str(spool), str(RUN_S), str(INTERVAL_S)],
                                     stdout=subprocess.PIPE, text=True)
        self.logged = -1
        self.confirmed = -1
        self.slowest_flush = 0.0
        self.started = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            kind, *rest = line.split()
            if kind == "s":
                self.logged = int(rest[0])
                self.started.set()
            elif kind == "c":
                self.confirmed = int(rest[0])
                self.slowest_flush = max(self.slowest_flush, float(rest[1]))
            elif kind == "f":
                self.slowest_flush = max(self.slowest_flush, float(rest[1]))

    def at(self, seconds: float) -> None:
        """Sleep until `seconds` after the child's first step."""
        self.started.wait(120)
        time.sleep(max(0.0, self._t0() + seconds - time.monotonic()))

    def _t0(self) -> float:
        if not hasattr(self, "_first"):
            self._first = time.monotonic()
        return self._first

    def wait(self) -> None:
        self.proc.wait(timeout=120)
        self._reader.join(timeout=30)


def trial(url: str, fault: str, spool: Path, controls: dict) -> dict:
    child = Child(url, spool)
    child.started.wait(120)
    child._t0()
    if fault in ("sigkill", "sigterm"):
        child.at(KILL_AT_S)
        child.proc.send_signal(signal.SIGKILL if fault == "sigkill" else signal.SIGTERM)
    elif fault == "sigkill in partition":
        child.at(FAULT_AT_S)
        controls["begin"]()
        child.at(FAULT_AT_S + KILL_AT_S)
        child.proc.send_signal(signal.SIGKILL)
        child.wait()
        controls["end"]()
    else:
        child.at(FAULT_AT_S)
        controls["begin"]()
        child.at(FAULT_AT_S + FAULT_FOR_S)
        controls["end"]()
    child.wait()
    with Monitor("trial", store=controls.get("direct_url", url),
                 settings=MonitorSettings(spool_dir=spool, handle_sigterm=False)):
        pass  # the next process on the host: replays what the spool holds
    with open_store(controls.get("direct_url", url)) as store:
        stored = set(store.load_run("trial").scalars.index.tolist())
        rows = store.count_rows("trial")
    lost = sum(1 for s in range(child.confirmed + 1) if s not in stored) * KEYS
    last_stored = max(stored) if stored else -1
    return {"confirmed": (child.confirmed + 1) * KEYS, "lost": lost, "duplicates": rows - len(stored) * KEYS,
            "tail_s": max(0, child.logged - last_stored) / RATE, "slowest_flush": child.slowest_flush}


def fresh_pg_db(admin: str = PG_ADMIN) -> str:
    name = f"gapwatch_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin.rsplit("/", 1)[0] + "/" + name


def sqlite_lock(path: Path) -> dict:
    """Another process's transaction holding SQLite's write lock (a stuck writer)."""
    holder = {}

    def begin():
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        holder["conn"] = conn

    def end():
        holder["conn"].execute("ROLLBACK")
        holder["conn"].close()

    return {"begin": begin, "end": end}


def scenarios(tmp: Path, private: PrivatePostgres):
    """(backend, fault, make) where make() -> (url, controls) for one fresh trial."""
    def sqlite(fault):
        def make():
            path = tmp / f"{uuid.uuid4().hex}.db"
            url = f"sqlite:///{path}"
            open_store(url).close()
            return url, (sqlite_lock(path) if fault == "lock held 5 s" else {})
        return make

    def pg(fault):
        def make():
            if fault == "server stop 5 s":
                url = fresh_pg_db(private.url)
                return url, {"begin": private.stop, "end": private.start}
            url = fresh_pg_db()
            if fault in ("partition 5 s", "sigkill in partition"):
                proxy = PartitionProxy("127.0.0.1", 5432)
                return proxy.url(url.rsplit("/", 1)[1]), {"begin": proxy.freeze, "end": proxy.thaw,
                                                          "direct_url": url, "proxy": proxy}
            return url, {}
        return make

    for fault in ("sigkill", "sigterm", "lock held 5 s"):
        yield "SQLite", fault, sqlite(fault)
    for fault in ("sigkill", "sigterm", "server stop 5 s", "partition 5 s", "sigkill in partition"):
        yield "PostgreSQL", fault, pg(fault)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_durability")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, default=None)
    args = parser.parse_args(argv)
    trials = args.trials or (1 if args.quick else 3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        private = PrivatePostgres()
        private.start()
        try:
            for backend, fault, make in scenarios(tmp, private):
                results = []
                for _ in range(trials):
                    url, controls = make()
                    spool = tmp / uuid.uuid4().hex
                    try:
                        results.append(trial(url, fault, spool, controls))
                    finally:
                        if "proxy" in controls:
                            controls["proxy"].stop()
                rows.append({
                    "store": backend, "fault": fault, "trials": trials,
                    "rows confirmed": f"{sum(r['confirmed'] for r in results):,}",
                    "rows lost": sum(r["lost"] for r in results),
                    "duplicates": sum(r["duplicates"] for r in results),
                    "tail lost (max s)": f"{max(r['tail_s'] for r in results):.2f}",
                    "slowest flush (s)": f"{max(r['slowest_flush'] for r in results):.2f}",
                })
                print(rows[-1], flush=True)
        finally:
            private.stop()
            subprocess.run(["rm", "-rf", private.dir], check=False)
    record("durability", "Client durability: faults while logging 10 metrics a step at 200 steps/s",
           table(rows) + "\n\nRows confirmed: logged before a flush() that returned True (one every 0.5 s). "
           "Rows lost: confirmed rows missing after the next process replayed the spool. Duplicates: rows "
           "stored under two attempts. Tail lost: logging after the last stored step (SIGKILL loses the "
           f"unflushed tail; the promise is about one flush interval, {INTERVAL_S} s here). Faults start "
           f"{FAULT_AT_S:.0f} s in and last {FAULT_FOR_S:.0f} s; SIGKILL and SIGTERM come {KILL_AT_S:.0f} s in "
           f"(inside a partition: {KILL_AT_S:.0f} s into it); "
           f"each child logs for {RUN_S:.0f} s.")


if __name__ == "__main__":
    main()
