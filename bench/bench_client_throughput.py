"""A flat-out writer: one process logs 10 metrics a step as fast as it can, into SQLite and into
PostgreSQL, and the client's sustained throughput is set beside the raw driver's (executemany /
binary COPY of the same rows into a table of the same key), measured in the same run.

Sustained throughput is rows stored over the time from the first log() to close()'s return, so
a backlog the writer still has to write at close counts against it. Also: rows lost, rows left in
the spool, "unreachable" warnings, the slowest log() and its 99.9th percentile, beside the
slowest turn of the same loop without a client (what the machine's scheduler alone costs), and
the load average while it ran.

    python -m bench.bench_client_throughput [--quick] [--pg postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import array
import gc
import logging
import multiprocessing
import os
import sqlite3
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from bench.results import record, table
from monitor.client import Monitor, MonitorSettings
from monitor.store import open_store

KEYS = [f"layers/l{i}_grad_norm" for i in range(10)]
RAW_TABLE = ("CREATE TABLE raw_metrics (run_id int, key_id int, step bigint, attempt int, value double precision, "
             "wall_time double precision, PRIMARY KEY (run_id, key_id, step, attempt))")
RAW_BATCH = 50_000


class Counted(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def raw_rows(n: int) -> list[tuple]:
    """Made by each raw run and let go after it: a million tuples kept alive beside the client would
    lengthen every full collection of the collector while it logs."""
    steps = np.arange(n) // len(KEYS)
    keys = np.arange(n) % len(KEYS)
    return list(zip([1] * n, keys.tolist(), steps.tolist(), [1] * n, (steps * 0.5).tolist(), [time.time()] * n))


def raw_sqlite(path: Path, n: int) -> float:
    rows = raw_rows(n)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(RAW_TABLE)
    began = time.perf_counter()
    for lo in range(0, len(rows), RAW_BATCH):
        with conn:
            conn.executemany("INSERT INTO raw_metrics VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                             rows[lo:lo + RAW_BATCH])
    took = time.perf_counter() - began
    conn.close()
    return len(rows) / took


def raw_postgres(url: str, n: int) -> float:
    import psycopg

    rows = raw_rows(n)
    with psycopg.connect(url) as conn:
        conn.execute(RAW_TABLE)
        conn.commit()
        began = time.perf_counter()
        for lo in range(0, len(rows), RAW_BATCH):
            with conn.cursor() as cur, cur.copy("COPY raw_metrics FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "int4", "int8", "int4", "float8", "float8"])
                for row in rows[lo:lo + RAW_BATCH]:
                    copy.write_row(row)
            conn.commit()
        return len(rows) / (time.perf_counter() - began)


class CollectorPasses:
    """The garbage collector's passes while logging, by generation: the longest, in ms."""

    def __init__(self) -> None:
        self.longest = {0: 0.0, 1: 0.0, 2: 0.0}
        self.full = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            gen = info["generation"]
            self.full += gen == 2
            self.longest[gen] = max(self.longest[gen], (time.perf_counter() - self._began) * 1000)


def flat_out(url: str, seconds: float, spool: str, freeze_gc: bool = True) -> dict:
    """Log flat out for `seconds`, in a process of its own as a trainer is (the client's collector
    freeze happens once a process); halfway through, one full collection of the garbage collector
    runs, as one would sooner or later in a long run, so the slowest log() includes one."""
    handler = Counted()
    logging.getLogger("gapwatch.client").addHandler(handler)
    passes = CollectorPasses()
    gc.collect()
    walked = len(gc.get_objects())
    mon = Monitor("flat", store=url, settings=MonitorSettings(spool_dir=Path(spool), handle_sigterm=False,
                                                             freeze_gc=freeze_gc))
    # Durations as C doubles, not a list of float objects: a list of millions of them is
    # what a full collection would walk, and would lengthen the very calls measured.
    calls = array.array("d")
    step = 0
    midway = threading.Timer(seconds / 2, gc.collect)
    gc.callbacks.append(passes)
    began = time.perf_counter()
    midway.start()
    while time.perf_counter() - began < seconds:
        metrics = {k: step * 0.5 for k in KEYS}
        t = time.perf_counter()
        mon.log(step, metrics)
        calls.append(time.perf_counter() - t)
        step += 1
    gc.callbacks.remove(passes)
    walked_after = len(gc.get_objects())
    t = time.perf_counter()
    mon.close()
    done = time.perf_counter()
    logging.getLogger("gapwatch.client").removeHandler(handler)
    with open_store(url) as store:
        stored = store.count_rows("flat")
    calls_us = np.frombuffer(calls, dtype=float) * 1e6
    return {"logged": step * len(KEYS), "stored": stored, "rate": stored / (done - began), "close_s": done - t,
            "spool_bytes": sum(p.stat().st_size for p in Path(spool).rglob("*.jsonl")),
            "unreachable": sum("unreachable" in m for m in handler.messages),
            "backpressure": sum("backpressure" in m for m in handler.messages),
            "max_ms": calls_us.max() / 1000, "collections_ms": passes.longest, "full_passes": passes.full,
            "walked": (walked, walked_after), "p999_us": float(np.quantile(calls_us, 0.999))}


def flat_out_process(url: str, seconds: float, spool: Path, freeze_gc: bool = True) -> dict:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(flat_out, (url, seconds, str(spool), freeze_gc))


def loop_alone(seconds: float) -> float:
    """The slowest turn (ms) of the trainer's loop with the log() call left out."""
    slowest = 0.0
    step = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        metrics = {k: step * 0.5 for k in KEYS}
        t = time.perf_counter()
        metrics = dict(metrics)
        slowest = max(slowest, time.perf_counter() - t)
        step += 1
    return slowest * 1000


def fresh_pg(admin_url: str) -> str:
    import psycopg

    name = f"gapwatch_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{admin_url.rsplit('/', 1)[0]}/{name}"


def drop_pg(admin_url: str, url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_client_throughput")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    seconds, n_raw = (2.0, 300_000) if args.quick else (10.0, 1_000_000)
    out = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for backend, freeze in (("sqlite", True), ("postgresql", True), ("postgresql", False)):
            # The raw driver runs before and after the client and the two are averaged: on a
            # shared machine the load moves within a minute.
            if backend == "sqlite":
                before = raw_sqlite(tmp / "raw-before.db", n_raw)
                ours = flat_out_process(f"sqlite:///{tmp / 'store.db'}", seconds, tmp / "spool-sqlite")
                after = raw_sqlite(tmp / "raw-after.db", n_raw)
            else:
                raw_urls, url = [fresh_pg(args.pg), fresh_pg(args.pg)], fresh_pg(args.pg)
                try:
                    before = raw_postgres(raw_urls[0], n_raw)
                    ours = flat_out_process(url, seconds, tmp / f"spool-pg-{freeze}", freeze)
                    after = raw_postgres(raw_urls[1], n_raw)
                finally:
                    for u in [*raw_urls, url]:
                        drop_pg(args.pg, u)
            raw = (before + after) / 2
            loads.append(os.getloadavg()[0])
            out.append({
                "store": backend + ("" if freeze else ", freeze_gc=False"),
                "raw driver rows/s (before / after)": f"{before:,.0f} / {after:,.0f}",
                "client rows/s": f"{ours['rate']:,.0f}",
                "client / raw": f"{ours['rate'] / raw:.2f}", "logged": f"{ours['logged']:,}",
                "lost": f"{ours['logged'] - ours['stored']:,}", "spool left (B)": ours["spool_bytes"],
                "close s": f"{ours['close_s']:.1f}", "unreachable": ours["unreachable"],
                "backpressure": ours["backpressure"], "slowest log ms": f"{ours['max_ms']:.1f}",
                "p99.9 log us": f"{ours['p999_us']:.0f}",
                "objects a full collection walks (before / while logging)":
                " / ".join(f"{n:,}" for n in ours["walked"]),
                "full collections while logging": ours["full_passes"],
                "longest collection while logging ms (gen 0 / 1 / 2)":
                " / ".join(f"{ours['collections_ms'][g]:.1f}" for g in (0, 1, 2)),
                "slowest loop turn without client ms":
                f"{loop_alone(min(seconds, 2.0)):.1f}"})
    record("client_throughput", f"Client: a flat-out writer ({seconds:.0f} s, 10 metrics a step) against the raw driver",
           table(out) + "\n\nSustained client rate = rows stored / (first log() to close() returning); the raw "
           "driver writes the same rows (executemany / binary COPY, 50k-row transactions) into a table of the "
           "same primary key, in the same run, just before and just after the client; client / raw is against "
           "their mean. Goals: client / raw >= 0.5, nothing lost or left in the spool, "
           "no \"unreachable\", slowest log() <= 50 ms. Each client run is a process of its own, as a trainer "
           "is. A full collection of the garbage collector walks every object the collector tracks and holds "
           "the interpreter lock while it does, so it stalls whatever call is running: one is forced halfway "
           "through each run, and the longest pass of each generation is given. The first Monitor of a process "
           "freezes what it finds (gc.freeze()), so that walk leaves out the imports; the last row turns that "
           "off (MonitorSettings(freeze_gc=False)). Load average (1 min) "
           "over the run: "
           f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores.")


if __name__ == "__main__":
    main()
