"""Checkpoint, resume and restart lines on every panel of a figure, and the highlight of a step range.

Lines are drawn as one scatter trace per event kind and panel, on a hidden y axis fixed to [0, 1]
laid over the panel, so they span its full height whatever its data range. Layout shapes would do
the same one shape per event, and plotly.py validates each shape: hundreds of checkpoints made a
figure take seconds to build and ~130 bytes of JSON per line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.frames import x_values
from app.figures.style import EVENT_COLORS, EVENT_DASH, HIGHLIGHT_COLOR
from monitor.schema import EventKind

DEFAULT_KINDS = tuple(EVENT_COLORS)
# More lines than this per kind turn a panel into a grey wall; resumes and restarts are rare and
# always all drawn, checkpoints (every few hundred steps) are thinned evenly down to it.
DEFAULT_MAX_PER_KIND = 200
ALWAYS_ALL = (EventKind.RESUME.value, EventKind.RESTART.value)


def panels(fig: go.Figure) -> list[tuple[str, str]]:
    """(x axis, y axis) of each panel that holds data: `("x", "y")`, `("x2", "y2")`, ...

    A panel is identified by its x axis; its y axis is the one that x axis is anchored to, so a
    secondary y axis laid over a panel does not count as a panel of its own.
    """
    layout = fig.layout.to_plotly_json()
    seen: dict[str, str] = {}
    for trace in fig.data:
        x = trace.xaxis or "x"
        if x not in seen:
            name = "xaxis" + x[1:]
            anchor = layout.get(name, {}).get("anchor")
            seen[x] = anchor if anchor and anchor != "free" else "y"
    return list(seen.items()) or [("x", "y")]


def _next_axis_number(fig: go.Figure) -> int:
    numbers = [1]
    for name in fig.layout.to_plotly_json():
        m = re.fullmatch(r"[xy]axis(\d*)", name)
        if m:
            numbers.append(int(m.group(1) or 1))
    for trace in fig.data:
        for ref in (trace.xaxis, trace.yaxis):
            if ref and ref[1:]:
                numbers.append(int(ref[1:]))
    return max(numbers) + 1


def add_event_markers(fig: go.Figure, events: pd.DataFrame | None, *, kinds: Sequence[str] = DEFAULT_KINDS,
                      max_per_kind: int = DEFAULT_MAX_PER_KIND, showlegend: bool = True) -> go.Figure:
    """Vertical lines at each event of the given kinds on every panel, one legend entry per kind
    (`showlegend=False` when a page explains the markers once for all its figures)."""
    if events is None or not len(events):
        return fig
    chosen = {}
    for kind in kinds:
        rows = events[events["kind"] == kind]
        if not len(rows):
            continue
        xs = np.unique(x_values(rows).astype(float))
        total = len(xs)
        if kind not in ALWAYS_ALL and total > max_per_kind:
            xs = xs[np.linspace(0, total - 1, max_per_kind).round().astype(int)]
        chosen[kind] = (xs, total)
    if not chosen:
        return fig
    number = _next_axis_number(fig)
    axes, traces = {}, []
    for i, (x_axis, y_axis) in enumerate(panels(fig)):
        axes[f"yaxis{number + i}"] = dict(overlaying=y_axis, range=[0, 1], visible=False, fixedrange=True,
                                          showgrid=False)
        for kind, (xs, total) in chosen.items():
            name = kind if len(xs) == total else f"{kind} ({len(xs)} of {total} shown)"
            traces.append(go.Scatter(
                x=np.repeat(xs, 3), y=np.tile(np.array([0.0, 1.0, np.nan]), len(xs)),
                xaxis=x_axis, yaxis=f"y{number + i}", mode="lines", name=name, legendgroup=f"event-{kind}",
                showlegend=showlegend and i == 0, hoverinfo="skip", connectgaps=False,
                line=dict(color=EVENT_COLORS.get(kind, "#999"), width=1, dash=EVENT_DASH.get(kind, "dot")),
            ))
    # One layout update and one add_traces: plotly.py re-validates the figure on each call.
    fig.update_layout(axes)
    fig.add_traces(traces)
    return fig


def add_range_highlight(fig: go.Figure, start: float, end: float) -> go.Figure:
    """Shade [start, end] (x values) on every panel: the range an alert link points at."""
    shapes = list(fig.layout.shapes or ())
    for x_axis, y_axis in panels(fig):
        shapes.append(dict(type="rect", xref=x_axis, yref=f"{y_axis} domain", x0=start, x1=max(end, start),
                           y0=0, y1=1, fillcolor=HIGHLIGHT_COLOR, line=dict(width=0), layer="below"))
    fig.update_layout(shapes=shapes)
    return fig
