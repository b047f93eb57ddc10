"""The callbacks: thin glue between the page, the queries and the figures.

Each reads its inputs, calls queries/panels/live, and returns what changed. The store and the
config are captured by closures at registration; no module state is read or written.
"""

from __future__ import annotations

import re
import time

from dash import ALL, Dash, Input, Output, State, ctx, no_update

from app import figures
from app.dashboard import layout, live, panels, queries
from app.dashboard.config import DashboardConfig
from app.dashboard.contain import contained, one_line
from app.dashboard.routes import ViewSpec, parse_run_path, run_href
from app.figures.series import MAX_SERIES
from monitor.judging.settings_diff import compare_settings
from monitor.errors import GapwatchError
from monitor.judging.judge import load_not_judged
from monitor.store import DatabaseError, Store, describe_db_error
from monitor.watch.run_watcher import is_watched

PANEL = {"type": "panel", "name": ALL}
# Plotly reports a zoom as `xaxis.range[0]`/`xaxis.range[1]` (or `xaxis2...` on a lower panel of a
# figure with shared x axes), a reset as `xaxis.autorange`.
_RANGE_KEY = re.compile(r"^xaxis\d*\.range\[(0|1)\]$")
_RANGE_LIST_KEY = re.compile(r"^xaxis\d*\.range$")
_AUTORANGE_KEY = re.compile(r"^xaxis\d*\.autorange$")

# Appends new points to the panels in the browser. `extendData` on a graph whose arrays came as
# typed-array specs ({dtype, bdata}, how plotly sends NumPy arrays) would extend nothing, so the
# traces to extend are first turned into plain arrays from plotly's decoded copy (`_fullData`);
# only those traces, and only once.
EXTEND_JS = """
function(update, ids) {
  const skip = window.dash_clientside.no_update;
  if (!update) { return ids.map(() => skip); }
  return ids.map((id) => {
    const change = update[id.name];
    if (!change) { return skip; }
    const el = document.getElementById(JSON.stringify(id, Object.keys(id).sort()));
    const gd = el && (el.classList.contains('js-plotly-plot') ? el : el.querySelector('.js-plotly-plot'));
    if (!gd || !gd.data) { return skip; }
    change[1].forEach((i) => {
      ['x', 'y'].forEach((axis) => {
        const v = gd.data[i][axis];
        if (v && !Array.isArray(v)) { gd.data[i][axis] = Array.from(gd._fullData[i][axis]); }
      });
    });
    return change;
  });
}
"""


def register(app: Dash, store: Store, config: DashboardConfig) -> None:
    @app.callback(Output("page", "children"), Input("url", "pathname"), Input("url", "search"),
                  State("written-url", "data"))
    def route(pathname, search, written):
        if written and written == f"{pathname}{search or ''}":
            # The page itself wrote this URL for a change of its view: it already shows it.
            return no_update
        try:
            names = store.list_runs()["name"].tolist()
        except DatabaseError as exc:
            return layout.store_unavailable(store.url.redacted(), describe_db_error(exc))
        if pathname in (None, "", "/"):
            return layout.overview_page(names)
        spec = parse_run_path(pathname, search)
        if spec is None:
            return layout.not_found(pathname)
        run = store.get_run(spec.run)
        if run is None:
            return layout.missing_run(spec.run)
        reference = spec.reference if spec.reference is not None else run["reference"]
        tasks, failed = contained("downstream tasks not ordered", lambda: queries.downstream_tasks(
            store, spec.run, reference if reference in names else None, config.max_points))
        if failed:
            tasks = queries.downstream_tasks(store, spec.run, None, config.max_points)
        step_range = (spec.lo, spec.hi) if spec.lo is not None else queries.link_range(spec.start, spec.end)
        notes = [failed] if failed else []
        if reference and reference not in names:
            notes.append(f"reference {reference!r} is not in the store (import it, or pick another): the run is "
                         "shown alone")
        series = queries.series_options(store, spec.run, reference if reference in names else None)
        return layout.run_page(spec, names, step_range, run["reference"], tasks, series=series, notes=notes)

    @app.callback(Output("runs-table", "children"), Input("poll", "n_intervals"), Input("url", "pathname"))
    def runs_table(_n, _path):
        return layout.runs_table(queries.overview(store, stale_after_s=config.stale_after_s))

    @app.callback(Output("compare-link", "href"), Input("compare-a", "value"), Input("compare-b", "value"))
    def compare_link(a, b):
        return run_href(a, reference=b) if a and b else "/"

    @app.callback(
        Output("view", "data"), Output("url", "search", allow_duplicate=True), Output("written-url", "data"),
        Input("ref-select", "value"), Input("axis-select", "value"), Input("show-all", "n_clicks"),
        Input("smoothing", "value"), Input("full-y", "value"), Input("series-pick", "value"),
        Input("task-select", "value"), Input(PANEL, "relayoutData"), State("view", "data"), State("url", "pathname"),
        prevent_initial_call=True,
    )
    def change_view(reference, axis, _show_all, smoothing, full_y, picked, tasks, _relayouts, view, pathname):
        """A new view from a control or a zoom, written into the URL too (so it can be shared)."""
        spec = ViewSpec.from_dict(view["spec"])
        before = spec
        step_range = tuple(view["range"]) if view["range"] else None
        if ctx.triggered_id == "ref-select" and (reference or None) == (view.get("shown_reference") or None):
            # The dropdown settling on the reference the page already shows is no change.
            return no_update, no_update, no_update
        if ctx.triggered_id == "show-all":
            step_range = None
        elif ctx.triggered_id == "ref-select":
            # "" is "no reference" (the dropdown cleared); None would mean "the run's own".
            spec = spec.replace(reference=reference or "")
        elif ctx.triggered_id == "axis-select":
            spec = spec.replace(axis=axis)
        elif ctx.triggered_id == "smoothing":
            spec = spec.replace(smoothing=float(smoothing or 0.0))
        elif ctx.triggered_id == "full-y":
            spec = spec.replace(full_y="all" in (full_y or []))
        elif ctx.triggered_id == "series-pick":
            spec = spec.replace(series=tuple(picked or ()))
        elif ctx.triggered_id == "task-select":
            spec = spec.replace(tasks=tuple(tasks or ()))
        else:
            zoom = _zoom(ctx.triggered[0]["value"] if ctx.triggered else None)
            if zoom is None:
                return no_update, no_update, no_update
            new_range = _to_steps(store, spec, zoom) if zoom != "all" else None
            if new_range == step_range:
                return no_update, no_update, no_update
            step_range = new_range
        if spec == before and step_range == (tuple(view["range"]) if view["range"] else None):
            return no_update, no_update, no_update
        spec = spec.replace(lo=step_range[0] if step_range else None, hi=step_range[1] if step_range else None)
        search = spec.search()
        shown = spec.reference if ctx.triggered_id == "ref-select" else view.get("shown_reference")
        return ({**view, "spec": spec.to_dict(), "range": list(step_range) if step_range else None,
                 "shown_reference": shown}, search, f"{pathname}{search}")

    @app.callback(
        Output(PANEL, "figure"), Output(PANEL, "style"), Output("live", "data"), Output("resolution", "children"),
        Output("notices", "children"), Output("settings", "children"),
        Input("view", "data"), Input("refresh", "data"),
    )
    def render(view, _refresh):
        spec = ViewSpec.from_dict(view["spec"])
        step_range = tuple(view["range"]) if view["range"] else None
        picked = list(spec.series)
        try:
            # Only the series drawn are read (a pick past MAX_SERIES waits, as the panel says).
            data = queries.load_view(store, spec, config.max_points, step_range, tuple(picked[:MAX_SERIES]))
        except DatabaseError as exc:
            # Keep what the page shows and say why it is not current.
            kept = [no_update] * len(ctx.outputs_list[0])
            return (kept, kept, no_update, no_update,
                    [f"The store cannot be read ({describe_db_error(exc)}): showing what was read before."], no_update)
        except GapwatchError as exc:
            # The run went away (deleted) since the page opened: say so, keep the rest.
            kept = [no_update] * len(ctx.outputs_list[0])
            return kept, kept, no_update, no_update, [f"{one_line(exc)}."], no_update
        # No pick: the first tasks in the report's order (most different from the reference first).
        rendered = panels.build(data, list(spec.tasks) or view.get("tasks"), params=config.detector_params,
                                picked=picked)
        state = live.initial_state(store, data, rendered, time.time())
        order = [o["id"]["name"] for o in ctx.outputs_list[0]]
        hidden = {"display": "none"}
        notes = [*view.get("notes", []), *data.notices, rendered.left_out_line()]
        ref = data.reference
        settings = layout.settings_section(
            compare_settings(data.run.info.config, ref.info.config) if ref is not None else None,
            data.run.name, ref.name if ref is not None else None)
        return ([rendered.figures[name] for name in order],
                [hidden if name in rendered.left_out else {} for name in order], state, rendered.resolution,
                [f"{n}. " for n in notes if n], settings)

    @app.callback(
        Output("append", "data"), Output("refresh", "data"), Output("alerts-version", "data"),
        Output("live", "data", allow_duplicate=True),
        Input("poll", "n_intervals"), State("live", "data"), State("refresh", "data"),
        State("alerts-version", "data"), prevent_initial_call=True,
    )
    def poll(_n, state, refresh, alerts_version):
        if not state:
            return no_update, no_update, no_update, no_update
        try:
            result = live.poll(store, state, max_points=config.max_points, full_refresh_s=config.full_refresh_s,
                               now=time.time())
        except (GapwatchError, DatabaseError):
            # The run was deleted, or the store is unreachable for a moment: leave the page as it is
            # and try again at the next poll.
            return no_update, no_update, no_update, no_update
        return (result.append if result.append else no_update,
                refresh + 1 if result.refresh else no_update,
                alerts_version + 1 if result.alerts_changed else no_update,
                result.state)

    app.clientside_callback(EXTEND_JS, Output(PANEL, "extendData"), Input("append", "data"), State(PANEL, "id"))

    @app.callback(Output("url", "search"), Input("alerts-graph", "clickData"), State("view", "data"),
                  prevent_initial_call=True)
    def open_clicked_alert(click, view):
        """A click on an alert's bar opens its step range, as the links under the timeline do."""
        points = (click or {}).get("points") or []
        if not points or "customdata" not in points[0]:
            return no_update
        start, end = (int(v) for v in points[0]["customdata"])
        return ViewSpec.from_dict(view["spec"]).replace(start=start, end=end, lo=None, hi=None).search()

    @app.callback(
        Output("alerts-graph", "figure"), Output("alerts-list", "children"), Output("not-judged-list", "children"),
        Input("view", "data"), Input("alerts-version", "data"),
    )
    def alerts(view, _version):
        spec = ViewSpec.from_dict(view["spec"])
        frame = queries.findings(store, spec.run)
        axis = queries.axis_for(store, store.run_info(spec.run), spec.axis) or queries.STEP_AXIS
        extent = queries.run_extent(store, spec.run)
        steps = view["range"] or extent
        x_range = tuple(float(x) for x in axis.to_x(list(steps))) if steps else None
        figure = figures.alerts_timeline(frame, x_title=axis.title, x_of_step=axis.to_x, x_range=x_range)
        if x_range is not None:
            figure.update_xaxes(range=list(x_range))
        return (figure, layout.alerts_list(frame, spec),
                layout.not_judged_list(load_not_judged(store, spec.run), spec.run, extent[1] if extent else None,
                                       watched=is_watched(store, spec.run)))


def _zoom(relayout: dict | None):
    """(x0, x1) of a zoom, "all" for a reset, None for anything else (autosize, legend clicks)."""
    if not relayout:
        return None
    if any(_AUTORANGE_KEY.match(k) for k in relayout):
        return "all"
    ends: dict[int, float] = {}
    for key, value in relayout.items():
        m = _RANGE_KEY.match(key)
        if m:
            ends.setdefault(int(m.group(1)), value)
        elif _RANGE_LIST_KEY.match(key) and isinstance(value, list) and len(value) == 2:
            ends.setdefault(0, value[0])
            ends.setdefault(1, value[1])
    if 0 in ends and 1 in ends:
        try:
            return float(ends[0]), float(ends[1])
        except (TypeError, ValueError):
            return None
    return None


def _to_steps(store: Store, spec: ViewSpec, zoom: tuple[float, float]) -> tuple[int, int]:
    axis = queries.axis_for(store, store.run_info(spec.run), spec.axis) or queries.STEP_AXIS
    lo, hi = sorted(axis.to_steps(list(zoom)))
    return max(0, int(lo)), max(0, int(hi) + 1)
