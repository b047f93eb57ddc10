"""Grad norm with its spikes marked, and the spike score on a second axis."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.frames import x_values
from app.figures.overlay import line_trace, series_uid
from app.figures.style import RUN_COLOR, SEVERITY_COLORS, base_figure, line_mode, note_empty, text
from monitor.schema import SPIKE_SCORE_GRAD_NORM, TRAIN_GRAD_NORM

SPIKE_SCORE_COLOR = "#9467bd"


def peak_markers(series: pd.DataFrame, detections: pd.DataFrame, name: str,
                 x_of_step: Callable[[np.ndarray], np.ndarray] | None = None) -> go.Scatter:
    """A marker at each detection's peak step, at the series' value there (interpolated on the
    points drawn, which on a downsampled series keep each bucket's extremes, so a spike is there)."""
    to_x = x_of_step or (lambda s: s)
    peaks = detections["peak_step"].to_numpy(dtype=float)
    x = np.asarray(to_x(peaks), dtype=float)
    steps = series["step"].to_numpy(dtype=float)
    values = series["value"].to_numpy(dtype=float)
    ok = np.isfinite(values)
    y = np.interp(peaks, steps[ok], values[ok]) if ok.any() else np.full(len(peaks), np.nan)
    severity = detections["severity"] if "severity" in detections else pd.Series("warning", index=detections.index)
    hover = (detections["message"].map(text) + "<br>step " + detections["peak_step"].astype("int64").astype(str)).to_numpy()
    return go.Scatter(
        x=x, y=y, mode="markers", name=name, hovertext=hover, hoverinfo="text",
        marker=dict(symbol="x", size=10, line=dict(width=2),
                    color=[SEVERITY_COLORS.get(s, "#d62728") for s in severity]),
    )


def grad_norm_figure(grad_norm: pd.DataFrame, *, spikes: pd.DataFrame | None = None,
                     spike_score: pd.DataFrame | None = None, x_title: str = "step",
                     x_of_step: Callable[[np.ndarray], np.ndarray] | None = None,
                     empty_reason: str = "no grad norm logged") -> go.Figure:
    """Series frames of grad norm and (optionally) its spike score; `spikes` is a detections frame."""
    fig = base_figure("grad norm", x_title, "grad norm")
    if not len(grad_norm):
        return note_empty(fig, empty_reason)
    if not np.isfinite(grad_norm["value"].to_numpy(dtype=float)).any():
        # Axes with nothing on them read as a drawing error; say what the run logged.
        return note_empty(fig, f"grad norm logged at {len(grad_norm):,} steps, every value NaN or Inf")
    fig.add_trace(line_trace(grad_norm, "grad norm", RUN_COLOR, width=1.1, uid=series_uid("run", TRAIN_GRAD_NORM)))
    if spikes is not None and len(spikes):
        fig.add_trace(peak_markers(grad_norm, spikes, f"spikes ({len(spikes)})", x_of_step))
    if spike_score is not None and len(spike_score):
        score = spike_score["value"].to_numpy(dtype=np.float32)
        fig.add_trace(go.Scatter(
            x=x_values(spike_score), y=score, name="spike score", yaxis="y2",
            line=dict(color=SPIKE_SCORE_COLOR, width=1.2, dash="dot"), hovertemplate="score %{y:.4f}",
            uid=series_uid("run", SPIKE_SCORE_GRAD_NORM), **line_mode(score, SPIKE_SCORE_COLOR),
        ))
        fig.update_layout(yaxis2=dict(overlaying="y", side="right", title_text="spike score",
                                      showgrid=False, rangemode="tozero", tickformat=".2~%",
                                      tickmode="auto"))
        fig.update_layout(margin=dict(r=60))
    return fig
