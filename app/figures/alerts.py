"""The alerts timeline: one bar per incident over its step range, coloured by severity, on a row
named as the incident is everywhere else (its explanation, not a detector's name)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.style import SEVERITY_COLORS, base_figure, note_empty, text

SEVERITY_ORDER = ("critical", "warning", "info")
# Bars are at least this share of the visible x range wide, so a one-step alert stays clickable.
MIN_BAR_FRACTION = 0.004
# A row's name wraps at this many characters: explanations run to 70, and a label that long would
# squeeze the bars into the right half of the chart.
LABEL_WIDTH = 36


def alerts_timeline(alerts: pd.DataFrame, *, x_title: str = "step",
                    x_of_step: Callable[[np.ndarray], np.ndarray] | None = None,
                    x_range: tuple[float, float] | None = None) -> go.Figure:
    """`alerts` has name (the incident's), metric, severity, start_step, end_step, message and
    optionally state and spans. One row per name, one bar per incident (row_labels), or per
    episode of a recurring incident (its `spans`)."""
    alerts = episode_bars(alerts)
    label = row_labels(alerts)
    lines = max((lab.count("<br>") + 1 for lab in set(label)), default=1)
    fig = base_figure("alerts and findings", x_title, height=140 + (14 + 12 * lines) * max(1, len(set(label))))
    if not len(alerts):
        return note_empty(fig, "no alerts and no stored findings")
    fig.update_layout(hovermode="closest", barmode="overlay")
    to_x = x_of_step or (lambda s: s)
    start = np.asarray(to_x(alerts["start_step"].to_numpy(dtype=float)), dtype=float)
    end = np.asarray(to_x(alerts["end_step"].to_numpy(dtype=float)), dtype=float)
    lo, hi = x_range if x_range is not None else (np.nanmin(start), np.nanmax(end))
    width = np.maximum(end - start, MIN_BAR_FRACTION * max(hi - lo, 1.0))
    state = alerts["state"] if "state" in alerts else pd.Series("", index=alerts.index)
    hover = (
        alerts["severity"].map(text) + " " + state.map(text) + "<br>" + alerts["message"].map(text)
        + "<br>steps " + alerts["start_step"].astype("int64").astype(str) + "–" + alerts["end_step"].astype("int64").astype(str)
    ).to_numpy()
    for severity in SEVERITY_ORDER:
        mask = (alerts["severity"] == severity).to_numpy()
        if not mask.any():
            continue
        fig.add_trace(go.Bar(
            y=label[mask], x=width[mask], base=start[mask], orientation="h", name=severity,
            marker=dict(color=SEVERITY_COLORS[severity]), hovertext=hover[mask], hoverinfo="text",
            customdata=np.column_stack([alerts["start_step"].to_numpy()[mask], alerts["end_step"].to_numpy()[mask]]),
        ))
    fig.update_yaxes(autorange="reversed", title_text="")
    return fig


def episode_bars(alerts: pd.DataFrame) -> pd.DataFrame:
    """One row per bar: a recurring incident (loss spikes that keep coming back, one row of a list)
    is a bar for each of its episodes (`spans`: [first, last] step each), not one bar across the
    clean steps between them."""
    if "spans" not in alerts or not len(alerts):
        return alerts
    spans = [s if isinstance(s, (list, tuple)) and len(s) else [(a, b)]
             for s, a, b in zip(alerts["spans"], alerts["start_step"], alerts["end_step"])]
    bars = alerts.assign(spans=spans).explode("spans", ignore_index=True)
    return bars.assign(start_step=[int(s[0]) for s in bars["spans"]], end_step=[int(s[1]) for s in bars["spans"]])


def row_labels(alerts: pd.DataFrame) -> np.ndarray:
    """Each bar's row: the incident's name, wrapped, so recurrences of one problem share a row; a
    name that incidents on several metrics share (spikes of the loss and of the grad norm) is
    followed by the metric."""
    if not len(alerts):
        return np.array([], dtype=object)
    names = alerts["name"].astype(str)
    shared = alerts.groupby(names)["metric"].transform("nunique") > 1
    full = np.where(shared, names + " (" + alerts["metric"].astype(str) + ")", names)
    return np.array(["<br>".join(text(line) for line in textwrap.wrap(f, LABEL_WIDTH)) or text(f) for f in full],
                    dtype=object)
