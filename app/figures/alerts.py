"""The alerts timeline: one bar per alert or stored finding over its step range, coloured by severity."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.style import SEVERITY_COLORS, base_figure, note_empty, text

SEVERITY_ORDER = ("critical", "warning", "info")
# Bars are at least this share of the visible x range wide, so a one-step alert stays clickable.
MIN_BAR_FRACTION = 0.004


def alerts_timeline(alerts: pd.DataFrame, *, x_title: str = "step",
                    x_of_step: Callable[[np.ndarray], np.ndarray] | None = None,
                    x_range: tuple[float, float] | None = None) -> go.Figure:
    """`alerts` has detector, metric, severity, start_step, end_step, peak_step, message (and
    optionally state). One row per detector·metric, one bar per alert."""
    rows = max(1, alerts[["detector", "metric"]].drop_duplicates().shape[0]) if len(alerts) else 1
    fig = base_figure("alerts and findings", x_title, height=140 + 26 * rows)
    if not len(alerts):
        return note_empty(fig, "no alerts and no stored findings")
    fig.update_layout(hovermode="closest", barmode="overlay")
    to_x = x_of_step or (lambda s: s)
    start = np.asarray(to_x(alerts["start_step"].to_numpy(dtype=float)), dtype=float)
    end = np.asarray(to_x(alerts["end_step"].to_numpy(dtype=float)), dtype=float)
    lo, hi = x_range if x_range is not None else (np.nanmin(start), np.nanmax(end))
    width = np.maximum(end - start, MIN_BAR_FRACTION * max(hi - lo, 1.0))
    label = (alerts["detector"].map(text) + " · " + alerts["metric"].map(text)).to_numpy()
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
