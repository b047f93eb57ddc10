"""`gapwatch detect`: judge a stored run (against its reference) and store what the detectors find."""

from __future__ import annotations

import argparse

from app.options import add_store_argument

JSON_KEYS = ("detector", "metric", "start_step", "end_step", "peak_step", "severity", "score", "message",
             "evidence")
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "detect",
        help="run the detectors over a stored run",
        description="Judge a stored run with the detectors (all, or those named), against a reference run "
        "when one is given or recorded for the run, print what they find and store it.",
    )
    parser.add_argument("--run", required=True, help="name of the run to judge")
    parser.add_argument("--reference", default=None,
                        help="reference run (default: the reference recorded for the run, if any)")
    add_store_argument(parser)
    parser.add_argument("--detectors", default=None, metavar="A,B",
                        help="comma-separated detector names (default: all)")
    parser.add_argument("--axis", default="auto", choices=("auto", "step", "tokens"),
                        help="axis on which the run meets its reference (default: auto)")
    parser.add_argument("--json", action="store_true",
                        help="print the detections as a JSON list instead of a table")
    parser.add_argument("--no-write", action="store_true", help="print only; store nothing")
    parser.add_argument("--replace", action="store_true",
                        help="forget the run's stored detections of these detectors first")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from rich.console import Console

    from monitor.detection import DetectConfig, detect_stored, severity_counts
    from monitor.store import open_store

    names = [n.strip() for n in args.detectors.split(",") if n.strip()] if args.detectors else None
    config = DetectConfig(detectors=names, axis=args.axis, replace=args.replace, write_series=not args.no_write)
    err = Console(stderr=True)
    store = open_store(args.store, read_only=args.no_write)
    try:
        with err.status("judging", spinner="dots") as status:
            result = detect_stored(store, args.run, args.reference, config, write=not args.no_write,
                                   progress=lambda msg: status.update(msg))
    finally:
        store.close()
    if args.json:
        rows = [{k: d.to_dict()[k] for k in JSON_KEYS} for d in result.detections]
        json.dump(rows, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    print_table(Console(), result)
    counts = severity_counts(result.detections)
    against = f" against {result.reference} ({result.axis} axis)" if result.reference else ""
    err.print(f"{args.run}{against}: {counts['critical']} critical, {counts['warning']} warning, "
              f"{counts['info']} info")
    for item in result.not_judged:
        err.print(item.describe(), markup=False, highlight=False)
    return 0


def print_table(console, result) -> None:
    from rich.table import Table

    if not result.detections:
        console.print(f"[green]nothing found in {result.run}[/green]")
        return
    table = Table(title=f"detections in {result.run}", show_lines=False)
    for col, kw in (("severity", {}), ("detector", {}), ("metric", {}), ("steps", {"justify": "right"}),
                    ("peak", {"justify": "right"}), ("score", {"justify": "right"}), ("message", {"ratio": 1})):
        table.add_column(col, **kw)
    for d in result.detections:
        sev = d.severity.value
        steps = f"{d.start_step:,}" if d.start_step == d.end_step else f"{d.start_step:,}–{d.end_step:,}"
        table.add_row(f"[{SEVERITY_STYLE[sev]}]{sev}[/]", d.detector, d.metric, steps, f"{d.peak_step:,}",
                      f"{d.score:.3g}", d.message)
    console.print(table)
