"""The run page's store reads on SQLite while another thread of the server runs Python.

The dashboard's server answers requests on several threads of one interpreter, so while one
request draws a figure, another waits for the store. Python's sqlite3 lets go of the interpreter
lock at each row it steps (and NumPy at many of its calls), and a thread that let go of it gets it
back only when the running thread's switch interval ends. The reads are timed alone and beside a
thread that runs Python without pause, two ways each, side by side in one run:

- row by row: each read's rows fetched one step a row (what the store did before);
- ours: each read's columns fetched as one row (database.fetch_columns);

both with the same queries (a run's eval series' rollups and its derived series in one query each);

under Python's default switch interval (5 ms) and under the dashboard's (app/commands/dashboard.py);
and the same reads on PostgreSQL, whose driver fetches a result whole, under both intervals.

The pair is bench/wide_pair.py's (101 series), imported from W&B history exports with
`gapwatch import`, as bench_wide_pages.py does; the reads are app.dashboard.queries.load_view of the
candidate's run page (both runs, every panel's series), the median of 3.

    python -m bench busy_reads [--steps 30000] [--quick] [--pg postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

from app.commands.dashboard import SWITCH_INTERVAL_S
from app.dashboard.queries import load_view
from app.dashboard.routes import ViewSpec
from bench.bench_client_throughput import drop_pg, fresh_pg
from bench.bench_end_to_end import cli, wandb_export
from bench.results import record, table
from bench.wide_pair import write_pair
from monitor.store import database, open_store

REPO = Path(__file__).resolve().parents[1]
REPEATS = 3


@contextmanager
def busy_thread():
    """A thread that runs Python without pause until the block ends."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def row_by_row():
    """The store's SQLite reads fetched one step a row, through the driver's cursor."""
    ours = database._sqlite_columns
    database._sqlite_columns = database._driver_columns
    try:
        yield
    finally:
        database._sqlite_columns = ours


def page_reads_s(url: str) -> float:
    with open_store(url, read_only=True) as store:
        times = []
        for _ in range(REPEATS):
            began = time.perf_counter()
            load_view(store, ViewSpec(run="cand"), 2000, None)
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_busy_reads")
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--quick", action="store_true", help="a 3,000-step pair")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    steps = 3_000 if args.quick else args.steps
    default_interval = sys.getswitchinterval()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"writing the pair ({steps:,} steps)", flush=True)
        write_pair(work / "pair", steps)
        stores = {"SQLite": f"sqlite:///{work}/wide.db", "PostgreSQL": fresh_pg(args.pg)}
        try:
            for url in stores.values():
                for name, reference_of in (("cand", None), ("ref", "cand")):
                    export = wandb_export(work / "pair" / f"{name}.csv", work / f"{name}-wandb.csv")
                    print(f"import {export.name}", flush=True)
                    cli(REPO, "import", export, "--store", url, "--run", name,
                        *(("--reference-of", reference_of) if reference_of else ()))
            for interval in (default_interval, SWITCH_INTERVAL_S):
                sys.setswitchinterval(interval)
                ways = (("SQLite", "row by row", row_by_row), ("SQLite", "ours: a row a read", nullcontext),
                        ("PostgreSQL", "ours", nullcontext))
                for store, way, patch in ways:
                    print(f"{store}, {way}, switch interval {interval * 1000:g} ms", flush=True)
                    with patch():
                        alone = page_reads_s(stores[store])
                        with busy_thread():
                            beside = page_reads_s(stores[store])
                    rows.append({"store": store, "reads": way, "switch interval (ms)": f"{interval * 1000:g}",
                                 "alone (s)": f"{alone:.2f}", "beside a busy thread (s)": f"{beside:.2f}",
                                 "slowdown": f"{beside / alone:.0f}x"})
        finally:
            sys.setswitchinterval(default_interval)
            drop_pg(args.pg, stores["PostgreSQL"])
    print(table(rows), flush=True)
    record("busy_reads", "SQLite reads beside a busy thread",
           f"A pair of {steps:,} steps x 101 series (bench/wide_pair.py) imported with `gapwatch import` into "
           "SQLite and into PostgreSQL; the run page's store reads (app.dashboard.queries.load_view, both runs), median of "
           f"{REPEATS}, alone and while another thread runs Python without pause (as a server thread drawing a "
           "figure does). Row by row: every read fetched a step a row, as the store did before; ours: a read's "
           "columns in one row (database.fetch_columns); the same queries both ways. Switch interval: Python's "
           "default, then the one `gapwatch dashboard` sets. PostgreSQL's driver fetches a result whole: its waits are NumPy's and the "
           "queries' own.\n\n" + table(rows))


if __name__ == "__main__":
    main()
