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
    for r in runs.to_dict("records"):
        last_seen = _present(r["last_wall_time"])
        ago = f"{now - last_seen:.0f} s ago" if last_seen is not None else "-"
        last = _present(r["last_step"])
        table.add_row(r["name"], r["status"], r["source"], _present(r["reference"]) or "-",
                      str(int(last)) if last is not None else "-", ago, str(r["attempts"]), str(r["open_alerts"]))
    Console().print(table)
    return 0


def _present(value):
    """None for a missing cell (pandas gives NaN for missing numbers and, in object columns, text)."""
    return None if value is None or (isinstance(value, float) and value != value) else value
