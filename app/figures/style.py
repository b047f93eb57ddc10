"""Colours, the plot template, text escaping and the loss panels' opening y range, shared by the
figures.

The template is a small explicit one rather than plotly's default: the default template alone adds
about 7 KB of JSON to every figure, which at nine panels is more than the data of a zoomed view.

A loss curve starts an order of magnitude above where it spends the run (a held-out loss of 22 at
step 0, 3.2 from step 500 on); a y range that includes the start flattens everything a person
reads. So a loss panel opens on the values after the first TRANSIENT_SHARE of the x span drawn,
with a margin (`clip_transient`); the page's "include the start" toggle draws the whole range.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go

from monitor.schema import EventKind

# One colour per run in every panel: the run blue, its reference orange. Held-out sets and
# downstream tasks are told apart by marker and panel, never by recolouring a run.
RUN_COLOR = "#1f77b4"
REFERENCE_COLOR = "#ff7f0e"
SET_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down",
               "pentagon", "hexagon", "star-triangle-up", "hourglass")
# A legend with more entries than this goes beside the plot, where it scrolls, not over the title.
LEGEND_INLINE_MAX = 6
BAND_COLOR = "rgba(31, 119, 180, 0.18)"
HIGHLIGHT_COLOR = "rgba(255, 200, 0, 0.22)"
SEVERITY_COLORS = {"info": "#4c78a8", "warning": "#f58518", "critical": "#d62728"}
# The events drawn as vertical lines on every chart, and how.
EVENT_COLORS = {EventKind.CHECKPOINT.value: "#9ecae1", EventKind.RESUME.value: "#2ca02c",
                EventKind.RESTART.value: "#d62728"}
EVENT_DASH = {EventKind.CHECKPOINT.value: "dot", EventKind.RESUME.value: "dash", EventKind.RESTART.value: "solid"}
SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")

TEMPLATE = go.layout.Template(
    layout=go.Layout(
        font=dict(family="system-ui, -apple-system, Segoe UI, sans-serif", size=12, color="#222"),
        paper_bgcolor="white",
        plot_bgcolor="white",
        # Title on the first line, legend on the second, both above the plot area.
        margin=dict(l=60, r=20, t=78, b=40),
        title=dict(x=0.01, xanchor="left", y=0.985, yanchor="top", yref="container", font=dict(size=14)),
        hovermode="x unified",
        xaxis=dict(showgrid=True, gridcolor="#eee", zeroline=False, linecolor="#999", ticks="outside",
                   automargin=True),
        yaxis=dict(showgrid=True, gridcolor="#eee", zeroline=False, linecolor="#999", ticks="outside",
                   automargin=True),
        # traceorder "normal": legend groups (used to toggle a kind across panels) must not stack
        # their entries vertically, which plotly does for "grouped".
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0.0, font=dict(size=11),
                    traceorder="normal"),
    )
)


def text(value: object) -> str:
    """User text made inert for plotly, which renders a subset of HTML in names, titles and hovers.

    Plotly decodes `&lt;`, `&gt;` and `&amp;` when it draws, so an escaped `<b>` shows as the literal
    characters; with `<` escaped no tag can form, so quotes need nothing (plotly would show
    `&quot;` as is). User text is never put into a hover *template*, where `%{...}` substitutes.
    """
    return html.escape(str(value), quote=False)


# A point with no finite neighbour (a run of one step, a value between two gaps) is on no line
# segment, so a line draws nothing of it: it gets a marker of this size, the others none.
LONE_MARKER_SIZE = 6


def line_mode(y: np.ndarray, color: str) -> dict:
    """`mode` (and `marker`) of a line trace of values `y`: a plain line, with a marker on each
    lone point where there is one."""
    finite = np.isfinite(np.asarray(y, dtype=float))
    lone = finite & ~np.r_[False, finite[:-1]] & ~np.r_[finite[1:], False]
    if not lone.any():
        return {"mode": "lines"}
    # Sizes per point: a live append adds points with no size, so no marker, to a trace like this.
    return {"mode": "lines+markers", "marker": dict(color=color, size=np.where(lone, LONE_MARKER_SIZE, 0))}


# Mantissas of log-axis ticks, sparsest first: plotly's own log ticks label every digit of a decade
# ("10 9 8 7 ... 2 1 9 8"), which piles up on a loss curve spanning one or two decades.
LOG_TICK_MANTISSAS = ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8))
LOG_TICKS_MAX = 8


def log_ticks(lo: float, hi: float) -> list[float]:
    """Round tick values for a log axis over [lo, hi] (both > 0): the densest set of at most
    LOG_TICKS_MAX, so a narrow range still gets a few ticks and a wide one is not crowded."""
    if not (lo > 0 and hi > lo and math.isfinite(hi)):
        return []
    best: list[float] = []
    for mantissas in LOG_TICK_MANTISSAS:
        ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in mantissas if lo <= m * 10.0 ** k <= hi]
        if len(ticks) > LOG_TICKS_MAX:
            break
        best = ticks
    return best


# Switch to a log axis when positive values span more than this ratio (max/min): below it a linear
# axis shows the late-training detail well enough.
LOG_AXIS_RATIO = 4.0


def log_y_axis_if_wide(fig: go.Figure, values: np.ndarray, row: int | None = None, col: int | None = None) -> bool:
    """A log y axis with readable round ticks (on one subplot, given `row` and `col`) when the
    finite `values` are all positive and span more than LOG_AXIS_RATIO, as early loss and
    perplexity do; returns whether it switched."""
    values = values[np.isfinite(values)]
    if not len(values) or values.min() <= 0 or values.max() / values.min() <= LOG_AXIS_RATIO:
        return False
    fig.update_yaxes(type="log", row=row, col=col)
    _log_ticks_over(fig, float(np.min(values)), float(np.max(values)), row=row, col=col)
    return True


def _log_ticks_over(fig: go.Figure, lo: float, hi: float, row: int | None = None, col: int | None = None) -> None:
    """Round ticks on a log y axis for the values lo..hi it shows."""
    ticks = log_ticks(lo, hi)
    if ticks:
        fig.update_yaxes(tickmode="array", tickvals=ticks, ticktext=[f"{t:.3g}" for t in ticks], row=row, col=col)


def side_legend(fig: go.Figure) -> go.Figure:
    """Move a long legend to the right of the plot (plotly scrolls it there) when it has more than
    LEGEND_INLINE_MAX entries; a short one stays on its line above the plot."""
    entries = sum(1 for t in fig.data if t.showlegend is not False)
    if entries > LEGEND_INLINE_MAX:
        fig.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top"),
                          margin=dict(t=44))
    return fig


def base_figure(title: str, x_title: str, y_title: str = "", height: int = 320) -> go.Figure:
    """An empty figure with the shared template; `title` is our own text, not user input."""
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title_text=title, height=height)
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return fig


# Fewer distinct steps than this on a panel's x axis get a tick each: plotly would put ticks at
# fractional steps around one evaluation (999.5, 1,000.5) and between two close ones.
FEW_POINTS = 5


def ticks_at_few_points(fig: go.Figure, x: np.ndarray, **where) -> None:
    """A tick at each of the x values when there are only a few of them (the x axis `where` picks
    one subplot: row=, col=)."""
    x = np.asarray(x, dtype=float)
    distinct = np.unique(x[np.isfinite(x)])
    if 0 < distinct.size < FEW_POINTS:
        fig.update_xaxes(tickmode="array", tickvals=distinct.tolist(), **where)


def small_multiples_layout(fig: go.Figure, *, title: str, rows: int, panels: int, columns: int, x_title: str,
                           base_height: int, row_height: int, top: int) -> None:
    """Size and label a grid of small panels (make_subplots, `columns` wide): the height grows
    with the rows, subplot titles sit just above each panel so the legend goes on a line of its
    own above them, and the lowest panel of each column carries the x title (the last row may be
    partial)."""
    height, bottom = base_height + row_height * rows, 40
    fig.update_layout(template=TEMPLATE, height=height, title_text=title, margin=dict(t=top, b=bottom),
                      legend=dict(y=1.0 + 26 / (height - top - bottom)))
    fig.update_annotations(font_size=11)
    for i in range(max(0, panels - min(columns, panels)), panels):
        fig.update_xaxes(title_text=x_title, row=i // columns + 1, col=i % columns + 1)


# An empty panel is a one-line note, not a tall grid of meaningless ticks.
EMPTY_HEIGHT = 150


def note_empty(fig: go.Figure, message: str = "no data") -> go.Figure:
    fig.add_annotation(text=message, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font=dict(size=14, color="#888"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=EMPTY_HEIGHT, margin=dict(t=40, b=10))
    return fig


# --- the opening y range of a loss panel ----------------------------------------------------------
TRANSIENT_SHARE = 0.05
MARGIN = 0.05


def steady_range(x: np.ndarray, y: np.ndarray, *, extra: list[tuple[np.ndarray, np.ndarray]] = (),
                 log: bool = False) -> tuple[float, float] | None:
    """(lo, hi) of `y` where x is past the transient, with the `extra` lines' (x, y) past it inside
    too (smoothed lines); in log10 units when `log` (plotly's range for a log axis). None when
    nothing is left or the transient sets no limit (then the default range is right)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & ((y > 0) if log else True)
    if ok.sum() < 2:
        return None
    x, y = x[ok], y[ok]
    cut = x.min() + TRANSIENT_SHARE * (x.max() - x.min())
    steady = y[x >= cut]
    if len(steady) < 2:
        return None
    # Whole min and max of the rest: a spike after the transient is what a person must see.
    lo, hi = float(steady.min()), float(steady.max())
    for ex, ey in extra:
        ex, v = np.asarray(ex, dtype=float), np.asarray(ey, dtype=float)
        v = v[(ex >= cut) & np.isfinite(v) & ((v > 0) if log else True)]
        if len(v):
            lo, hi = min(lo, v.min()), max(hi, v.max())
    if hi >= y.max() and lo <= y.min():
        return None  # the transient sets no limit: nothing to clip
    if log:
        lo, hi = np.log10(lo), np.log10(hi)
    pad = MARGIN * (hi - lo if hi > lo else abs(hi) or 1.0)
    return float(lo - pad), float(hi + pad)


def clip_transient(fig: go.Figure, x: np.ndarray, y: np.ndarray, *,
                   extra: list[tuple[np.ndarray, np.ndarray]] = ()) -> go.Figure:
    """Set the figure's y range to `steady_range` (on its log or linear axis)."""
    log = fig.layout.yaxis.type == "log"
    span = steady_range(x, y, extra=extra, log=log)
    if span is not None and log and span[1] - span[0] < math.log10(LOG_AXIS_RATIO):
        # The log axis was for the transient; the steady range left is narrow, and a linear axis
        # reads it better (a log one's round ticks left one label in it).
        log, span = False, steady_range(x, y, extra=extra)
        fig.update_yaxes(type="linear", tickmode="auto", tickvals=None, ticktext=None)
    if span is not None:
        fig.update_yaxes(range=list(span), autorange=False)
        if log:  # ticks for the range shown, not the whole run's
            _log_ticks_over(fig, 10 ** span[0], 10 ** span[1])
    return fig
