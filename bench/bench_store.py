"""Store ingest and the point-budget reader, each against the raw driver doing the least it can.

- Ingest: rows/s through `Store.write_metrics` (validation, idempotent insert, series marks,
  rollups at four levels) vs raw `sqlite3.executemany` / psycopg binary COPY into an identical
  table with the same primary key, same batches, one transaction per batch.
- Read: `read_scalars` of a 1.41M-step series at 2,000 points vs fetching every row.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg

from bench.results import record, table
from monitor.store import open_store

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
KEYS = [f"train/metric_{i}" for i in range(10)]


def batches(n_steps: int, steps_per_batch: int):
    rng = np.random.default_rng(0)
    for lo in range(0, n_steps, steps_per_batch):
        steps = np.arange(lo, min(n_steps, lo + steps_per_batch))
        yield pd.DataFrame({
            "step": np.repeat(steps, len(KEYS)),
            "key": KEYS * len(steps),
            "value": rng.normal(3.0, 0.1, len(steps) * len(KEYS)),
        })


def ours(url: str, frames: list[pd.DataFrame]) -> float:
    with open_store(url) as store:
        store.ensure_run("bench")
        started = time.perf_counter()
        for frame in frames:
            store.write_metrics("bench", frame)
        return time.perf_counter() - started


def as_tuples(frame: pd.DataFrame) -> list[tuple]:
    key_ids = frame["key"].map({k: i for i, k in enumerate(KEYS)})
    now = time.time()
    return list(zip([1] * len(frame), key_ids.tolist(), frame["step"].tolist(), [1] * len(frame),
                    frame["value"].tolist(), [now] * len(frame)))


def raw_sqlite(path: Path, frames: list[pd.DataFrame]) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE metrics (run_id INTEGER, key_id INTEGER, step INTEGER, attempt INTEGER, "
                 "value REAL, wall_time REAL, PRIMARY KEY (run_id, key_id, step, attempt)) WITHOUT ROWID")
    started = time.perf_counter()
    for frame in frames:
        rows = as_tuples(frame)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def raw_copy(url: str, frames: list[pd.DataFrame]) -> float:
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE raw_metrics (run_id int4, key_id int4, step int8, attempt int4, value float8, "
                     "wall_time float8, PRIMARY KEY (run_id, key_id, step, attempt))")
        conn.commit()
        started = time.perf_counter()
        for frame in frames:
            rows = as_tuples(frame)
            with conn.cursor() as cur, cur.copy("COPY raw_metrics FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "int4", "int8", "int4", "float8", "float8"])
                for row in rows:
                    copy.write_row(row)
            conn.commit()
        return time.perf_counter() - started


def fresh_pg_database() -> str:
    name = f"gapwatch_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_pg_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_ingest(n_steps: int, steps_per_batch: int) -> list[dict]:
    frames = list(batches(n_steps, steps_per_batch))
    rows = n_steps * len(KEYS)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        t_ours = ours(f"sqlite:///{tmp}/ours.db", frames)
        t_raw = raw_sqlite(Path(tmp) / "raw.db", frames)
        out.append({"backend": "SQLite", "rows": rows, "ours rows/s": f"{rows / t_ours:,.0f}",
                    "raw rows/s": f"{rows / t_raw:,.0f}", "ours / raw": f"{t_raw / t_ours:.0%}"})
    db = fresh_pg_database()
    try:
        url = PG_ADMIN.rsplit("/", 1)[0] + "/" + db
        t_ours = ours(url, frames)
        t_raw = raw_copy(url, frames)
        out.append({"backend": "PostgreSQL", "rows": rows, "ours rows/s": f"{rows / t_ours:,.0f}",
                    "raw rows/s": f"{rows / t_raw:,.0f}", "ours / raw": f"{t_raw / t_ours:.0%}"})
    finally:
        drop_pg_database(db)
    return out


def bench_read(n_steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/read.db"
        values = 3.0 + np.random.default_rng(1).normal(0, 0.01, n_steps)
        with open_store(url) as store:
            store.ensure_run("long")
            for lo in range(0, n_steps, 200_000):
                hi = min(n_steps, lo + 200_000)
                store.write_metrics("long", pd.DataFrame({"step": np.arange(lo, hi), "key": "train/loss",
                                                          "value": values[lo:hi]}))
            store.read_scalars("long", "train/loss", max_points=2000)  # warm the page cache for both
            timings = []
            for _ in range(5):
                started = time.perf_counter()
                frame = store.read_scalars("long", "train/loss", max_points=2000)
                timings.append(time.perf_counter() - started)
            with store.engine.connect() as conn:
                started = time.perf_counter()
                every = conn.exec_driver_sql(
                    "SELECT step, value FROM metrics WHERE run_id = 1 AND key_id = 1 ORDER BY step").fetchall()
                t_all = time.perf_counter() - started
        return {"steps": f"{n_steps:,}", "points returned": len(frame),
                "read_scalars (median of 5)": f"{np.median(timings) * 1000:.1f} ms",
                "every row": f"{t_all * 1000:.0f} ms ({len(every):,} rows)",
                "speed-up": f"{t_all / np.median(timings):.0f}x"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_store")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n_ingest = 20_000 if args.quick else 100_000
    n_read = 200_000 if args.quick else 1_410_000
    print(f"ingest: {n_ingest:,} steps x {len(KEYS)} metrics, 1,000 steps a transaction", flush=True)
    ingest = bench_ingest(n_ingest, 1000)
    print(f"read: one series of {n_read:,} steps at 2,000 points", flush=True)
    read = bench_read(n_read)
    record(
        "store",
        "Store: ingest and point-budget reads",
        "Ingest (goal: ours >= 50% of the raw driver; batches of 1,000 steps x 10 metrics, one transaction each):\n\n"
        + table(ingest)
        + "\n\nRead (goal: < 100 ms for 2,000 points of a 1.41M-step series):\n\n"
        + table([read]),
    )


if __name__ == "__main__":
    main()
