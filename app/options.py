"""Command-line options shared by several subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

FAIL_EXIT = 1
"""Exit status of a command whose findings reached its --fail-on severity (2 is a usage error)."""


def add_store_argument(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=default,
        help="store URL (sqlite:///path.db or postgresql://host/db); "
        "default: $GAPWATCH_STORE, else a SQLite file in the per-user data directory",
    )


def add_fail_on_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fail-on", choices=("warning", "critical"), default=None,
        help=f"exit with status {FAIL_EXIT} when a finding of this severity or worse is found (for CI)",
    )


def fails(fail_on: str | None, severities: Iterable) -> bool:
    """Whether any of `severities` (Severity or its name) reaches `fail_on` (never without one)."""
    from monitor.schema import Severity  # pandas: not at parser build time, `gapwatch --help` stays fast

    if fail_on is None:
        return False
    bar = Severity(fail_on).rank
    return any(Severity(s).rank >= bar for s in severities)
