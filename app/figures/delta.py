"""The run's difference from its reference, with the band inside which it is not divergence."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.style import TRANSIENT_SHARE, BAND_COLOR, RUN_COLOR, base_figure, line_mode, note_empty, text

DEFAULT_BAND_LABEL = "divergence threshold"
POINTS_COLOR = "rgba(120, 120, 120, 0.45)"


def delta_figure(windows: pd.DataFrame, points: pd.DataFrame | None = None, *, run_name: str,
                 reference_name: str, x_title: str = "step", band_label: str = DEFAULT_BAND_LABEL,
                 title: str = "train loss delta (run − reference)", summary: str = "window median",
                 empty_reason: str = "no overlapping steps with the reference", full_y: bool = False) -> go.Figure:
    """`windows` (x, delta, band): window medians (or what `summary` names) and the band's
    half-width, drawn as a ribbon around zero; `points` (x, delta), the pointwise difference, drawn
    faintly underneath. Unless `full_y`, the y range is set by the windows after the early
    transient, as the loss panels' is (two recipes differ most in their first steps, and that would
    hide the band)."""
    fig = base_figure(title, x_title, "Δ loss")
    if not len(windows) and (points is None or not len(points)):
        return note_empty(fig, empty_reason)
    if points is not None and len(points):
        y = points["delta"].to_numpy(dtype=np.float32)
        fig.add_trace(go.Scatter(
            x=points["x"].to_numpy(), y=y, name="pointwise", line=dict(color=POINTS_COLOR, width=0.8),
            hoverinfo="skip", **line_mode(y, POINTS_COLOR),
        ))
    if len(windows):
        x = windows["x"].to_numpy(dtype=float)
        band = windows["band"].to_numpy(dtype=float)
        fig.add_trace(go.Scatter(x=x, y=band, mode="lines", line=dict(width=0), hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(x=x, y=-band, mode="lines", line=dict(width=0), fill="tonexty",
                                 fillcolor=BAND_COLOR, name=text(band_label), hoverinfo="skip"))
        medians = windows["delta"].to_numpy(dtype=float)
        fig.add_trace(go.Scatter(
            x=x, y=medians, name=f"{text(run_name)} − {text(reference_name)} ({text(summary)})",
            line=dict(color=RUN_COLOR, width=1.8), customdata=band,
            hovertemplate="Δ %{y:.4f} (threshold ±%{customdata:.4f})", **line_mode(medians, RUN_COLOR),
        ))
        # Keep the band readable: pointwise noise can be 10x the window medians' range.
        steady = x >= x.min() + TRANSIENT_SHARE * (x.max() - x.min())
        if full_y or steady.sum() < 2:
            steady = np.ones(x.size, dtype=bool)
        reach = np.nanmax(np.abs(np.concatenate([band[steady], medians[steady]])))
        if np.isfinite(reach) and reach > 0:
            fig.update_yaxes(range=[-2.2 * reach, 2.2 * reach])
    fig.add_shape(type="line", xref="paper", x0=0, x1=1, yref="y", y0=0, y1=0, line=dict(color="#444", width=1))
    return fig
