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


def add_watch_config_argument(parser: argparse.ArgumentParser,
                              overrides: tuple[str, ...] = ("--detectors", "--axis")) -> None:
    """--config FILE; `overrides`: the command's own options that take precedence over the file."""
    parser.add_argument(
        "--config", metavar="FILE", default=None,
        help="the watch service's config file (YAML or TOML): its detectors, detector_params, axis and "
        "incidents settings judge the run, so the findings are the ones `gapwatch watch --config FILE` "
        f"reaches ({' and '.join(overrides)}, when given, override{'s' if len(overrides) == 1 else ''} it)",
    )


def port(text: str) -> int:
    """An argparse type: a TCP port, 1 to 65535, or 0 for any free one (the server says which)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1 to 65535, or 0 for any free one)")
    return value


def judging_settings(args: argparse.Namespace):
    """(DetectConfig, IncidentConfig or None) from --config FILE (the watch service's), then
    --detectors and --axis where they were given."""
    from dataclasses import replace

    from monitor.judging.engine import DetectConfig, DetectionEngine
    from monitor.watch.config import load_judging

    detect, incidents = load_judging(args.config) if args.config else (DetectConfig(), None)
    names = getattr(args, "detectors", None)
    if names:
        detect = replace(detect, detectors=[n.strip() for n in names.split(",") if n.strip()])
        DetectionEngine(detect)  # a bad name is one line, before any run is loaded
    if getattr(args, "axis", None):
        detect = replace(detect, axis=args.axis)
    return detect, incidents
