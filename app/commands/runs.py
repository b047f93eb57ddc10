"""`gapwatch runs`: the runs in a store, one line each."""

from __future__ import annotations

import argparse
import time

from app.options import add_store_argument


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("runs", help="list the runs in the store", description="List the runs in the store.")
    add_store_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from monitor.store import open_store

    with open_store(args.store, read_only=False) as store:
        runs = store.list_runs()
    if args.json:
        print(json.dumps(runs.astype(object).where(runs.notna(), None).to_dict("records"), default=str))
        return 0
    table = Table(title=f"runs in {store.url.redacted()}")
    for column in ("run", "status", "source", "reference", "last step", "last metric", "attempts", "open alerts"):
        table.add_column(column)
    now = time.time()
    for r in runs.itertuples():
        ago = "-" if r.last_wall_time != r.last_wall_time or r.last_wall_time is None else f"{now - r.last_wall_time:.0f} s ago"
        last = "-" if r.last_step != r.last_step or r.last_step is None else str(int(r.last_step))
        table.add_row(r.name, r.status, r.source, r.reference or "-", last, ago, str(r.attempts), str(r.open_alerts))
    Console().print(table)
    return 0
