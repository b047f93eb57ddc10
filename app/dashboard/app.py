"""The Dash application: built by a factory around one read-only store, nothing global.

Callbacks are registered on the app instance (`app.callback`), not through Dash's module-level
registry, so two apps in one process (tests) never share or leak state.
"""

from __future__ import annotations

from dash import Dash

from app.dashboard import callbacks, guard, health
from app.dashboard.auth import AuthConfig, install
from app.dashboard.config import DashboardConfig
from app.dashboard.layout import shell
from monitor.store import Store

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0; color: #222; background: #f6f7f9; }
header.top { display: flex; gap: 1em; align-items: baseline; padding: 10px 24px; background: #1f2a36; }
header.top .brand { color: #fff; font-weight: 700; font-size: 20px; text-decoration: none; }
header.top .tagline { color: #9fb0c3; font-size: 13px; }
main { padding: 8px 24px 40px; }
h1 { font-size: 22px; margin: 14px 0 8px; word-break: break-all; }
h2 { font-size: 17px; margin: 22px 0 8px; }
table.runs { border-collapse: collapse; background: #fff; width: 100%; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
table.runs th, table.runs td { padding: 7px 12px; border-bottom: 1px solid #eee; text-align: left; font-size: 14px; }
table.runs th { background: #fafafa; font-weight: 600; color: #555; }
.health { color: #fff; border-radius: 10px; padding: 2px 9px; font-size: 12px; font-weight: 600; }
.alerts-count.hot { color: #d62728; font-weight: 700; }
.compare { display: flex; gap: 10px; align-items: center; max-width: 900px; }
.compare .pick { flex: 1; min-width: 220px; }
.button { background: #1f77b4; color: #fff; padding: 7px 14px; border-radius: 4px; text-decoration: none;
          border: none; font-size: 14px; cursor: pointer; }
.run-head { display: flex; flex-wrap: wrap; justify-content: space-between; align-items: center; gap: 12px; }
.controls { display: flex; gap: 10px; align-items: center; font-size: 14px; }
.controls .pick { width: 260px; }
.smoothing-slider { width: 240px; }
.view-options .rc-slider { padding-top: 18px; }
.task-row { display: flex; gap: 10px; align-items: center; font-size: 14px; margin: 0 0 8px; }
.resolution { font-size: 13px; color: #555; margin: 4px 0 8px; display: flex; justify-content: space-between; }
.notices { color: #a15c00; font-size: 13px; }
.cell-note { color: #a15c00; font-size: 12px; }
.panels { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; align-items: start; }
.panel { background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
@media (max-width: 1100px) { .panels { grid-template-columns: 1fr; } }
ul.alerts { list-style: none; padding: 0; }
li.alert { background: #fff; padding: 8px 12px; margin-bottom: 6px; box-shadow: 0 1px 2px rgba(0,0,0,.08); font-size: 14px; }
li.alert span { margin-right: 10px; }
.sev { color: #fff; border-radius: 3px; padding: 1px 6px; font-size: 12px; font-weight: 600; }
.sev-critical { background: #d62728; } .sev-warning { background: #f58518; } .sev-info { background: #4c78a8; }
.alert .message { color: #444; margin-top: 4px; }
h3 { font-size: 15px; margin: 16px 0 6px; color: #555; }
ul.not-judged { list-style: none; padding: 0; font-size: 13px; }
li.not-judged-item { padding: 4px 12px; margin-bottom: 4px; border-left: 3px solid #bbb; }
li.not-judged-item .what { font-weight: 600; }
li.not-judged-item .message { color: #555; }
.muted { color: #888; }
details.settings { margin: 16px 0 6px; font-size: 13px; }
details.settings summary { cursor: pointer; font-size: 15px; color: #555; font-weight: 600; }
table.settings-table { border-collapse: collapse; margin-top: 6px; }
table.settings-table th, table.settings-table td { padding: 2px 12px 2px 0; text-align: left; border-bottom: 1px solid #eee; }
table.settings-table tr.differs td { background: #fff4e5; }
"""

INDEX = """<!DOCTYPE html>
<html>
<head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + STYLE + """</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body>
</html>"""


def create_app(store: Store, config: DashboardConfig | None = None, auth: AuthConfig | None = None) -> Dash:
    config = config or DashboardConfig()
    app = Dash(
        __name__,
        title=config.title,
        update_title=None,
        # Pages are built by the router callback, so most components do not exist at start-up.
        suppress_callback_exceptions=True,
        index_string=INDEX,
    )
    install(app.server, auth or AuthConfig(), open_paths=(health.PATH,))
    guard.install(app)
    health.install(app.server, store)
    # Flask's registry for per-app objects: lets the server (and tests) reach the store it reads.
    app.server.extensions["gapwatch_store"] = store
    app.layout = shell(int(config.poll_interval_s * 1000))
    callbacks.register(app, store, config)
    return app
