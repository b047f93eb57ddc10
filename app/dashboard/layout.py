"""The pages: runs overview, run page (run against a reference or any other run), not found.

Every run name and metric key reaches the page as a text child or a prop value, which React
renders as text; links carry names percent-encoded (routes.run_href). Nothing is passed as HTML.
"""

from __future__ import annotations

import math

import pandas as pd
from dash import dcc, html

from app.dashboard.panels import PANELS
from app.dashboard.queries import DownstreamTasks
from app.dashboard.routes import ViewSpec, run_href
from app.figures.evals import DEFAULT_MAX_TASKS
from app.figures.style import EVENT_COLORS, EVENT_DASH
from app.output import ago
from monitor.detectors import judging
from monitor.judging.settings_diff import SettingsDiff
from monitor.judging.judge import NotJudgedAsOf

HEALTH_COLORS = {"ok": "#2ca02c", "warning": "#f58518", "critical": "#d62728", "stale": "#8c8c8c",
                 "crashed": "#d62728", "had critical": "#9d5a5a", "not judged": "#b0b0b0"}
BORDER_STYLE = {"dot": "dotted", "dash": "dashed", "solid": "solid"}


def shell(poll_interval_ms: int) -> html.Div:
    """The frame around every page: the URL, the header and a container the router fills."""
    return html.Div([
        dcc.Location(id="url", refresh=False),
        # The last URL the page wrote for a change of view: the router leaves that page in place.
        dcc.Store(id="written-url"),
        html.Header([dcc.Link("gapwatch", href="/", className="brand"),
                     html.Span("runs against their reference", className="tagline")], className="top"),
        html.Main(id="page"),
        dcc.Interval(id="poll", interval=poll_interval_ms),
        # An empty graph, never shown: the browser fetches and compiles plotly.js, the largest script
        # of the pages, while the runs overview is read, not after a click on a run, whose panels
        # would wait for it.
        dcc.Graph(id="plotly-preload", style={"display": "none"}),
    ])


def overview_page(run_names: list[str]) -> html.Div:
    options = [{"label": n, "value": n} for n in run_names]
    return html.Div([
        html.H1("Runs"),
        html.Div(id="runs-table", className="table-wrap"),
        html.H2("Compare two runs"),
        html.Div([
            dcc.Dropdown(id="compare-a", options=options, placeholder="run", className="pick"),
            html.Span("against", className="between"),
            dcc.Dropdown(id="compare-b", options=options, placeholder="reference", className="pick"),
            dcc.Link("compare", id="compare-link", href="/", className="button"),
        ], className="compare"),
    ], id="overview")


def runs_table(frame: pd.DataFrame) -> html.Table | html.P:
    if not len(frame):
        return html.P("No runs in this store yet.", className="muted")
    head = html.Thead(html.Tr([html.Th(c) for c in (
        "run", "health", "status", "reference", "last step", "tokens", "last metric", "open alerts")]))
    body = []
    for r in frame.itertuples(index=False):
        # pandas stores a missing name as NaN, not None.
        if not isinstance(r.reference, str):
            reference = "—"
        elif r.reference_missing:  # named, never imported (or removed): a link would lead nowhere
            reference = [r.reference, html.Div("not in the store", className="cell-note")]
        else:
            reference = dcc.Link(r.reference, href=run_href(r.reference))
        body.append(html.Tr([
            html.Td(dcc.Link(r.name, href=run_href(r.name), className="run-link")),
            html.Td(html.Span(r.health, className="health", style={"background": HEALTH_COLORS.get(r.health, "#999")})),
            html.Td(r.status),
            html.Td(reference),
            html.Td(_int(r.last_step)),
            html.Td([_si(r.tokens), *([html.Div(r.note, className="cell-note")] if isinstance(r.note, str) else [])]),
            html.Td(ago(r.since_last_s)),
            html.Td(str(r.open_alerts), className="alerts-count" + (" hot" if r.open_alerts else "")),
        ], className="run-row"))
    return html.Table([head, html.Tbody(body)], className="runs")


def run_page(spec: ViewSpec, run_names: list[str], step_range: tuple[int, int] | None,
             default_reference: str | None, downstream: DownstreamTasks, series: list[str] | None = None,
             notes: list[str] | None = None) -> html.Div:
    """`series`: every key the runs logged, offered to be drawn on their own; `notes`: one line
    each about what the page could not do (shown with the view's notices)."""
    tasks = downstream.names
    others = [{"label": n, "value": n} for n in run_names if n != spec.run]
    reference = spec.reference if spec.reference is not None else default_reference
    view = {"spec": spec.to_dict(), "range": list(step_range) if step_range else None, "shown_reference": reference,
            "tasks": tasks, "notes": list(notes or [])}
    # No height on the graphs: each figure carries its own (an empty panel is a short note).
    graphs = {
        p: dcc.Graph(id={"type": "panel", "name": p}, className=f"panel panel-{p}",
                     config={"displaylogo": False, "scrollZoom": False})
        for p in PANELS
    }
    return html.Div([
        html.Div([
            html.H1(spec.run, id="run-title"),
            html.Div([
                html.Label("reference"),
                dcc.Dropdown(id="ref-select", options=others, value=reference, placeholder="none",
                             className="pick"),
                html.Label("x axis"),
                dcc.RadioItems(id="axis-select", options=[{"label": " step", "value": "step"},
                                                          {"label": " tokens", "value": "tokens"}],
                               value=spec.axis, inline=True),
                html.Button("show all steps", id="show-all", className="button"),
            ], className="controls"),
            html.Div([
                html.Label("smoothing", htmlFor="smoothing"),
                html.Div(dcc.Slider(id="smoothing", min=0, max=0.99, step=0.01, value=spec.smoothing,
                                    marks={0: "0", 0.5: "0.5", 0.99: "0.99"},
                                    tooltip={"placement": "bottom"}, updatemode="mouseup"),
                         className="smoothing-slider"),
                dcc.Checklist(id="full-y", options=[{"label": " y range includes the start", "value": "all"}],
                              value=["all"] if spec.full_y else [], inline=True),
            ], className="controls view-options"),
        ], className="run-head"),
        html.Div(id="notices", className="notices"),
        html.Div([html.Span(id="resolution"), marker_key()], className="resolution"),
        html.Div([
            html.Label("downstream metrics"),
            dcc.Dropdown(id="task-select", options=[{"label": t, "value": t} for t in tasks], multi=True,
                         value=list(spec.tasks),
                         placeholder=(f"all {len(tasks)}" if len(tasks) <= DEFAULT_MAX_TASKS
                                      else f"the first {DEFAULT_MAX_TASKS} of {len(tasks)}, " + (
                                          "most different first" if downstream.by_difference else "alphabetically")),
                         style={"minWidth": "420px"}),
        ], className="task-row", style=None if tasks else {"display": "none"}),
        html.Div([graphs[p] for p in PANELS if p != "picked"], className="panels"),
        html.Div([
            html.Label("more series"),
            dcc.Dropdown(id="series-pick", options=[{"label": k, "value": k} for k in series or []], multi=True,
                         value=list(spec.series),
                         placeholder=f"any of the {len(series or [])} logged series, run over reference "
                                     "(type to search: optim/lr, ...)",
                         style={"minWidth": "520px"}),
        ], className="task-row series-row"),
        graphs["picked"],
        html.H2("Alerts and findings"),
        dcc.Graph(id="alerts-graph", config={"displaylogo": False}),
        html.Ul(id="alerts-list", className="alerts"),
        html.Details(id="settings", className="settings"),
        html.H3("Not judged"),
        html.Ul(id="not-judged-list", className="not-judged"),
        dcc.Store(id="view", data=view),
        dcc.Store(id="live"),
        dcc.Store(id="append"),
        dcc.Store(id="refresh", data=0),
        dcc.Store(id="alerts-version", data=0),
    ], id="run-page")


# Past this many differing settings the rest are counted, not listed (the report lists more).
MAX_SETTINGS_SHOWN = 40
# Settings named in the folded block's one line.
SETTINGS_IN_SUMMARY = 2


def settings_section(diff: SettingsDiff | None, run: str, reference: str | None) -> list:
    """The children of the run page's settings block: a one-line summary that opens onto the
    settings in which the run differs from its reference."""
    if diff is None:
        return [html.Summary("Settings: no reference to compare them with")]
    if not diff.comparable:
        return [html.Summary(f"Settings: {diff.why_not(run, reference)}")]
    n = len(diff.differences)
    given = [d for d in diff.differences if d.both]
    # The first two the runs give differently (the learning rate first) are read without a click.
    shown = ", ".join(f"{d.setting} {d.run} vs {d.reference}" for d in given[:SETTINGS_IN_SUMMARY])
    more = f" and {len(given) - SETTINGS_IN_SUMMARY:,} more" if len(given) > SETTINGS_IN_SUMMARY else ""
    head = html.Summary(f"Settings that differ from {reference}: {shown + more if given else 'none'} given "
                        f"differently, {n - len(given):,} recorded by one run only (of {diff.total:,})" if n
                        else f"Settings: the same {diff.total:,} as {reference}")
    if not n:
        return [head]
    rows = [html.Tr([html.Td(d.setting), html.Td(d.run), html.Td(d.reference)], className="differs" if d.both else "")
            for d in diff.differences[:MAX_SETTINGS_SHOWN]]
    more = n - len(rows)
    return [head, html.Table([html.Thead(html.Tr([html.Th("setting"), html.Th(run), html.Th(reference)])),
                              html.Tbody(rows)], className="settings-table"),
            *([html.P(f"{more:,} more differ (the report lists them).", className="muted")] if more else [])]


def marker_key() -> html.Span:
    """What the vertical lines on every chart mean (colours and dashes of app.figures.style)."""
    items = []
    for kind in EVENT_COLORS:
        line = {"display": "inline-block", "width": "22px", "verticalAlign": "middle", "margin": "0 4px 0 12px",
                "borderTop": f"2px {BORDER_STYLE[EVENT_DASH[kind]]} {EVENT_COLORS[kind]}"}
        items += [html.Span(style=line), html.Span(kind)]
    return html.Span(items, className="marker-key")


def alerts_list(alerts: pd.DataFrame, spec: ViewSpec) -> list:
    """One item per alert or stored finding; its link opens the step range in this same view
    (the reference and axis kept)."""
    if not len(alerts):
        return [html.Li("Nothing found on this run: no alerts and no stored detections.", className="muted")]
    items = []
    for a in alerts.itertuples(index=False):
        items.append(html.Li([
            html.Span(a.severity, className=f"sev sev-{a.severity}"),
            html.Span(a.state, className="state"),
            html.Span(a.name, className="what", title=f"{a.incident_id}: {a.detector} on {a.metric}"),
            dcc.Link(f"steps {a.start_step:,}–{a.end_step:,}",
                     href=spec.replace(start=int(a.start_step), end=int(a.end_step), lo=None, hi=None).href(),
                     className="alert-link"),
            html.Div(a.message, className="message"),
        ], className="alert"))
    return items


def not_judged_list(judged: NotJudgedAsOf | None, run: str, last_step: int | None, watched: bool = False) -> list:
    """What the last whole-run judgement (`gapwatch detect`) could not judge, one item each, after
    a line saying how far the run had got then: where nothing was found, this says whether that is
    because nothing could be. A run only the watch service judges says so: its alerts are its
    findings, and `detect` says what could not be judged."""
    again = html.Code(f"gapwatch detect --run {run}")
    if judged is None and watched:
        return [html.Li(["The watch service judges this run as it logs (its alerts are above); no whole-run "
                         "judgement is stored to say what its detectors could not judge yet: ", again,
                         " does."], className="muted")]
    if judged is None:
        return [html.Li(["No whole-run judgement of this run is stored: ", again,
                         " says what its detectors could not judge."], className="muted")]
    when = "The last gapwatch detect judged " + (f"to step {judged.to_step:,}" if judged.to_step is not None
                                                 else "this run")
    if judged.to_step is not None and last_step is not None and last_step > judged.to_step:
        said = [f"{when}; the run is at step {last_step:,} now: ", again, " judges it again."]
    else:
        said = [f"{when}." if judged.items else f"{when}: every detector judged it."]
    return [html.Li(said, className="muted")] + [html.Li([html.Span(judging(n.detector), className="what"),
                              *([html.Span(f" ({n.metric})", className="metric")] if n.metric else []),
                              html.Div(n.reason + (f" (needs {n.needs})" if n.needs else ""), className="message")],
                             className="not-judged-item") for n in judged.items]


def not_found(path: str) -> html.Div:
    return html.Div([html.H1("Not found"), html.P(["Nothing at ", html.Code(path), ". ",
                                                    dcc.Link("All runs", href="/")])])


def missing_run(name: str) -> html.Div:
    return html.Div([html.H1("No such run"), html.P(["The store has no run named ", html.Code(name), ". ",
                                                      dcc.Link("All runs", href="/")])])


def store_unavailable(url: str, reason: str) -> html.Div:
    return html.Div([html.H1("Store unavailable"),
                     html.P(["Cannot read ", html.Code(url), ": ", reason, ". The page retries when reloaded."])])


def _int(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{int(v):,}"


def _si(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f}{unit}"
    return f"{v:.0f}"

