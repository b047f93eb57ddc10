"""Command-line options shared by several subcommands."""

from __future__ import annotations

import argparse


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="store URL (sqlite:///path.db or postgresql://host/db); "
        "default: $GAPWATCH_STORE, else a SQLite file in the per-user data directory",
    )
