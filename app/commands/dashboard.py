"""`gapwatch dashboard`: serve the live dashboard over a store (read-only)."""

from __future__ import annotations

import argparse

from app.options import add_store_argument, port

# The server answers requests on threads of one interpreter. A request that waits on the store or
# on NumPy lets go of the interpreter lock and gets it back only when the thread running Python
# (another request drawing a figure) reaches the end of its switch interval: once per wait. An
# interval a tenth of Python's default bounds those waits (bench/RESULTS.md, "SQLite reads beside a
# busy thread").
SWITCH_INTERVAL_S = 0.0005


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="serve the live dashboard",
        description="Serve the live dashboard (runs overview, run against reference, alerts) with waitress. "
        "It binds 127.0.0.1 unless told otherwise; any other address needs "
        "GAPWATCH_DASHBOARD_PASSWORD (basic auth, user $GAPWATCH_DASHBOARD_USER or 'gapwatch') or "
        "GAPWATCH_DASHBOARD_TOKEN (bearer token; browsers open any page once with ?token=...).",
    )
    add_store_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8050, help="port (default: 8050; 0: any free one)")
    parser.add_argument("--poll", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between live updates of an open page (default: 2)")
    parser.add_argument("--max-points", type=int, default=2000,
                        help="points per series in a view (default: 2000)")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="the watch service's config file (YAML or TOML): its detector_params set the "
                        "thresholds the charts draw, as the alerts were judged")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging
    import sys

    from app.dashboard.auth import AuthConfig
    from app.dashboard.config import DashboardConfig
    from app.dashboard.server import make_server, open_app
    from monitor.errors import GapwatchError
    from monitor.watch.config import load_judging

    if args.poll <= 0 or args.max_points < 100:
        raise GapwatchError("--poll must be positive and --max-points at least 100")
    params = load_judging(args.config)[0].params if args.config else {}
    config = DashboardConfig(store_url=args.store, host=args.host, port=args.port, poll_interval_s=args.poll,
                             max_points=args.max_points, detector_params=params)
    app = open_app(config, AuthConfig.from_env())
    server = make_server(app, config)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # A failing callback is logged by Flask (and answered with a 500): show it on stderr.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"gapwatch dashboard on http://{host}:{server.effective_port}/ (Ctrl+C to stop)", flush=True)
    try:
        server.run()
    finally:
        server.close()
    return 0
