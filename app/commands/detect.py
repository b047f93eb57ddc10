"""`gapwatch detect`: judge a stored run (against its reference) and store what the detectors find.

Findings print grouped into incidents by the watch service's rule (monitor/alerting/grouping.py):
one row per detector x metric x episode with its count and its worst detection. `--fail-on` makes
the exit status say whether anything that severe was found, for a CI job to gate on.
"""

from __future__ import annotations

import argparse

from monitor.jsonutil import plain

from app.options import (
    FAIL_EXIT,
    add_fail_on_argument,
    add_store_argument,
    add_watch_config_argument,
    fails,
    judging_settings,
)

JSON_KEYS = ("detector", "metric", "start_step", "end_step", "peak_step", "severity", "score", "message",
             "evidence")
GROUP_KEYS = (("incident_id", "story", "name", "state", "explanations") + JSON_KEYS
              + ("count", "episodes", "period_steps", "spans"))
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "detect",
        help="run the detectors over a stored run",
        description="Judge a stored run with the detectors (all, or those named), against a reference run "
        "when one is given or recorded for the run, print what they find grouped into incidents, and "
        f"store it. Exit status: 0, or {FAIL_EXIT} with --fail-on when a finding reached that severity.",
    )
    parser.add_argument("--run", required=True, help="name of the run to judge")
    parser.add_argument("--reference", default=None,
                        help="reference run (default: the reference recorded for the run, if any)")
    add_store_argument(parser)
    add_watch_config_argument(parser)
    parser.add_argument("--detectors", default=None, metavar="A,B",
                        help="comma-separated detector names (default: the config's, else all)")
    parser.add_argument("--axis", default=None, choices=("auto", "step", "tokens"),
                        help="axis on which the run meets its reference (default: the config's, else auto)")
    parser.add_argument("--json", action="store_true",
                        help="print the findings as a JSON list instead of rows")
    parser.add_argument("--ungrouped", action="store_true",
                        help="one row per detection instead of one per incident")
    add_fail_on_argument(parser)
    parser.add_argument("--no-write", action="store_true", help="print only; store nothing")
    parser.add_argument("--replace", action="store_true",
                        help="forget the run's stored detections of these detectors first")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from dataclasses import replace

    from monitor.alerting.grouping import group, most_severe_first, progress_from_marks
    from monitor.detectors import judging
    from monitor.judging.judge import detect_stored, severity_counts
    from monitor.store import open_store

    from app.heap import collect_less, keep_freed_memory
    from app.output import phases
    from monitor.judging.settings_diff import compare_settings, summary_line

    keep_freed_memory()  # whole runs in memory: freed pages are reused (app/heap.py)
    collect_less()
    detect, incidents_config = judging_settings(args)
    config = replace(detect, replace=args.replace, write_series=not args.no_write)
    # Judging needs a stored run: a mistyped store path is an error, never a new empty store.
    store = open_store(args.store, read_only=args.no_write, create=False)
    try:
        with phases("detect") as progress:
            result = detect_stored(store, args.run, args.reference, config, write=not args.no_write,
                                   progress=progress, incidents=incidents_config)
            progress("grouping findings into incidents")
            marks = store.run_marks(args.run).series
            settings = (summary_line(compare_settings(store.run_info(args.run).config,
                                                      store.run_info(result.reference).config),
                                     args.run, result.reference) if result.reference else None)
    finally:
        store.close()
    incidents = most_severe_first(group(result.detections, progress_from_marks(args.run, marks), incidents_config,
                                        cleans=result.cleans))
    if args.json:
        if args.ungrouped:
            rows = [{k: d.to_dict()[k] for k in JSON_KEYS} for d in result.detections]
        else:
            rows = [{k: i.to_dict()[k] for k in GROUP_KEYS} for i in incidents]
        json.dump(plain(rows), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print_findings(result, incidents, ungrouped=args.ungrouped)
    against = f" against {result.reference} ({result.axis} axis)" if result.reference else ""
    # The severities are counted over what the table lists: incidents, or detections when ungrouped.
    listed = severity_counts(result.detections if args.ungrouped else incidents)
    severities = ", ".join(f"{n} {s}" for s, n in listed.items() if n)
    severities = f" ({severities})" if severities else ""
    found = (f"{len(result.detections)} detection(s){severities} in {len(incidents)} incident(s)" if args.ungrouped
             else f"{len(incidents)} incident(s){severities} from {len(result.detections)} detection(s)")
    print(f"{args.run}{against}: {found}", file=sys.stderr)
    if settings:
        print(settings, file=sys.stderr)
    for item in result.not_judged:
        print(item.describe(judging(item.detector)), file=sys.stderr)
    return FAIL_EXIT if fails(args.fail_on, [d.severity for d in result.detections]) else 0


def print_findings(result, incidents, ungrouped: bool = False) -> None:
    from app.findings import headline, steps
    from app.output import Column, is_terminal, print_rows

    if not result.detections and is_terminal():
        print(f"nothing found in {result.run}")
        return
    if ungrouped:
        columns = [Column("severity"), Column("detector"), Column("metric"), Column("steps", right=True),
                   Column("peak", right=True), Column("score", right=True), Column("message", wraps=True)]
        rows = [[d.severity.value, d.detector, d.metric,
                 f"{d.start_step:,}" if d.start_step == d.end_step else f"{d.start_step:,}–{d.end_step:,}",
                 f"{d.peak_step:,}", f"{d.score:.3g}", d.message] for d in result.detections]
        severities = [d.severity.value for d in result.detections]
        title = f"detections in {result.run}"
    else:
        columns = [Column("severity"), Column("incident"), Column("id"), Column("state"),
                   Column("steps", right=True), Column("detections", right=True), Column("finding", wraps=True)]
        rows = [[i.severity.value, i.name, i.incident_id, "resolved" if i.resolved else "open", steps(i), i.count,
                 headline(i)]
                for i in incidents]
        severities = [i.severity.value for i in incidents]
        title = f"findings in {result.run} (one row per incident)"
    print_rows(columns, rows, title=title, styles=[SEVERITY_STYLE[s] for s in severities])
