"""`gapwatch watch`: follow runs in the store, detect as rows arrive, and send alerts."""

from __future__ import annotations

import argparse

from monitor.jsonutil import plain

from app.options import FAIL_EXIT, add_fail_on_argument, add_store_argument, fails

NOT_JUDGED_EXIT = 3
"""Exit status of `watch --once` when a watched run could not be judged: its verdict is unknown, so
this overrides 0 and the --fail-on status alike (2 stays a usage error)."""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "watch",
        help="watch runs and send alerts (console, Slack, webhooks)",
        description="Follow runs in the store, run the detectors on every new step, and turn detections "
        "into alerts: one per incident, resolved when it ends, delivered through an outbox that "
        "survives restarts. Slack: set SLACK_WEBHOOK_URL (never printed). With --once: one pass, the "
        f"watched runs' notifications delivered, and exit status {FAIL_EXIT} with --fail-on when one of "
        f"their open alerts reached that severity, or {NOT_JUDGED_EXIT} when a watched run could not be judged "
        "(one line each says which and why).",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", action="append", metavar="R", help="run to watch (repeat for several)")
    which.add_argument("--all", action="store_true",
                       help="every run in the store, including new ones; a run without a reference is judged "
                       "by the detectors that need none")
    parser.add_argument("--reference", metavar="B", help="reference run (default: each run's stored reference)")
    add_store_argument(parser)
    parser.add_argument("--config", metavar="FILE", help="YAML or TOML file: sinks, silences, incidents, delivery")
    parser.add_argument("--once", action="store_true", help="one detection pass and one delivery pass, then exit")
    parser.add_argument("--poll-interval", type=float, metavar="S", help="seconds between polls (default 1)")
    parser.add_argument("--detectors", metavar="NAMES", help="comma-separated detector names (default: all)")
    parser.add_argument("--json", action="store_true",
                        help="with --once: print the watched runs' open alerts as JSON (console alerts go to stderr)")
    add_fail_on_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import logging
    import signal
    import sys
    import threading

    from monitor.alerting.ledger import AlertLedger
    from monitor.judging.engine import DetectionEngine
    from monitor.errors import GapwatchError
    from monitor.store import open_store
    from monitor.watch.config import load_config
    from monitor.watch.service import TargetSpec, WatchService

    if args.reference and not args.run:
        raise GapwatchError("--reference goes with --run")
    for flag, given in (("--json", args.json), ("--fail-on", args.fail_on)):
        if given and not args.once:
            raise GapwatchError(f"{flag} goes with --once")
    config = load_config(args.config)
    if args.poll_interval is not None:
        if args.poll_interval <= 0:
            raise GapwatchError(f"--poll-interval must be positive, not {args.poll_interval}")
        config.poll_interval_s = args.poll_interval
    if args.detectors:
        config.detect.detectors = [n.strip() for n in args.detectors.split(",") if n.strip()]
        DetectionEngine(config.detect)  # a bad name fails here, in one line, before anything starts

    targets = TargetSpec(runs=tuple(args.run or ()), reference=args.reference, all_runs=args.all)
    # Named runs must exist already; --all may start on a store that no run has written to yet.
    store = open_store(args.store, create=bool(args.all))
    try:
        watched = "every run" if args.all else ", ".join(
            f"{t.run} (reference: {_reference_of(t)})" for t in targets.resolve(store))
        _log_to_stderr(config)
        log = logging.getLogger("gapwatch.watch")
        # With --json, stdout holds the JSON alone; console alerts go where the log goes.
        service = WatchService(store, config, targets, stream=sys.stderr if args.json else None)
        log.info("watching %s in %s; every %.1f s; sinks: %s", watched, store.url.redacted(),
                 config.poll_interval_s, "; ".join(s.describe() for s in config.alerting.sinks))
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: service.stop())
        service.run(once=args.once)
        not_judged = dict(service.failed) if args.once else {}
        runs = service.watched_runs() if args.once else None
        pending = service.outbox.pending_count(runs)
        if pending:
            log.info("%d notification(s) wait in the outbox for the next start", pending)
        ledger = AlertLedger(store, config.alerting)
        open_alerts = [a for run in runs for a in ledger.alerts(run, state="open")] if args.once else []
    finally:
        store.close()
    if args.json:
        json.dump(plain([{k: getattr(a, k) for k in ALERT_KEYS}
                         | {"severity": a.severity.value, "name": a.name, "incident_id": a.incident_id}
                         for a in open_alerts]), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    for run, why in not_judged.items():
        print(f"gapwatch watch: error: could not judge run {run!r}: {why}", file=sys.stderr)
    if not_judged:
        return NOT_JUDGED_EXIT
    return FAIL_EXIT if fails(args.fail_on, [a.severity for a in open_alerts]) else 0


ALERT_KEYS = ("id", "run", "attempt", "story", "detector", "metric", "start_step", "end_step", "peak_step", "score",
              "message", "evidence", "opened_at", "updated_at")


def _log_to_stderr(config) -> None:
    import logging
    import sys

    from monitor.alerting.secrets import RedactingFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    # Whatever a library logs passes this filter: no sink URL reaches the terminal or a log file.
    handler.addFilter(RedactingFilter(*[s.url for s in config.alerting.sinks if s.url is not None]))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def _reference_of(target) -> str:
    if target.missing_reference is not None:
        return f"{target.missing_reference}, not in the store yet"
    return target.reference or "none"
