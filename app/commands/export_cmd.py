"""`gapwatch export --run NAME -o FILE`: a stored run's history out as CSV, JSON Lines or Parquet."""

from __future__ import annotations

import argparse

from app.options import add_store_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a stored run's history to CSV, JSONL or Parquet",
        description="Write a run's history as gapwatch holds it, one row per (step, attempt, key) "
        "with its value, to FILE: CSV, JSON Lines (with the run's events) or Parquet, by its "
        "extension. Written a key at a time; `gapwatch import FILE` gives back the same run.",
    )
    parser.add_argument("--run", required=True, metavar="NAME", help="run in the store")
    parser.add_argument("--keys", action="append", metavar="GLOB", default=None,
                        help="only keys matching this glob (e.g. 'eval/heldout/*'); repeat for "
                        "more (default: every key)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="file to write: .csv, .jsonl or .parquet")
    add_store_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from monitor.importers.run_export import export_kind, export_run
    from monitor.store import open_store

    export_kind(args.output)  # a wrong extension fails before the store is opened
    with open_store(args.store, read_only=True) as store:
        rows = export_run(store, args.run, args.output, keys=args.keys)
    Console(stderr=True).print(f"wrote {rows:,} rows of run {args.run!r} to {args.output}",
                               highlight=False, soft_wrap=True)
    return 0
