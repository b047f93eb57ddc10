"""Throughput (the run's tokens per second, or one device's where that is what the trainer logs), MFU
and step time in panels sharing x, with stalls shaded."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.frames import series_frame
from app.figures.grad_norm import peak_markers
from app.figures.overlay import line_trace, series_uid
from app.figures.style import SEVERITY_COLORS, SERIES_COLORS, TEMPLATE, base_figure, note_empty
from monitor.schema import PERF_DEVICE_TOKENS_PER_S, PERF_MFU, PERF_STEP_TIME_S, PERF_TOKENS_PER_S

PANELS = ((PERF_TOKENS_PER_S, "tokens/s"), (PERF_DEVICE_TOKENS_PER_S, "tokens/s per device"), (PERF_MFU, "MFU"),
          (PERF_STEP_TIME_S, "step time (s)"))
# Past this many stall intervals the shading is a wall; the largest (by score) are drawn.
MAX_STALL_SHAPES = 100


def throughput_figure(perf: pd.DataFrame, *, stalls: pd.DataFrame | None = None, x_title: str = "step",
                      x_of_step: Callable[[np.ndarray], np.ndarray] | None = None,
                      empty_reason: str = "no throughput logged") -> go.Figure:
    """`perf` is a long frame (key, step, value [, x]) of the perf/* keys; `stalls` a detections frame."""
    present = [(k, label) for k, label in PANELS if len(perf) and (perf["key"] == k).any()]
    if not present:
        return note_empty(base_figure("throughput", x_title), empty_reason)
    fig = make_subplots(rows=len(present), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    step_time_row = None
    for row, (key, label) in enumerate(present, start=1):
        frame = series_frame(perf, key)
        fig.add_trace(line_trace(frame, label, SERIES_COLORS[row - 1], width=1.1, uid=series_uid("run", key)),
                      row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)
        if key == PERF_STEP_TIME_S:
            step_time_row = (row, frame)
    if stalls is not None and len(stalls):
        _shade_stalls(fig, stalls, len(present), x_of_step)
        if step_time_row is not None:
            row, frame = step_time_row
            fig.add_trace(peak_markers(frame, stalls, f"stalls ({len(stalls)})", x_of_step), row=row, col=1)
    fig.update_xaxes(title_text=x_title, row=len(present), col=1)
    fig.update_layout(template=TEMPLATE, height=150 + 140 * len(present),
                      title_text="throughput, MFU and step time")
    return fig


def _shade_stalls(fig: go.Figure, stalls: pd.DataFrame, rows: int, x_of_step) -> None:
    to_x = x_of_step or (lambda s: s)
    if len(stalls) > MAX_STALL_SHAPES and "score" in stalls:
        stalls = stalls.sort_values("score", ascending=False).head(MAX_STALL_SHAPES)
    start = np.asarray(to_x(stalls["start_step"].to_numpy(dtype=float)), dtype=float)
    end = np.asarray(to_x(stalls["end_step"].to_numpy(dtype=float)), dtype=float)
    colors = [SEVERITY_COLORS.get(s, "#d62728") for s in stalls.get("severity", pd.Series("warning", index=stalls.index))]
    shapes = list(fig.layout.shapes or ())
    for row in range(1, rows + 1):
        suffix = "" if row == 1 else str(row)
        for x0, x1, color in zip(start, end, colors):
            shapes.append(dict(type="rect", xref=f"x{suffix}", yref=f"y{suffix} domain", x0=x0, x1=max(x1, x0),
                               y0=0, y1=1, fillcolor=color, opacity=0.15, line=dict(width=0), layer="below"))
    fig.update_layout(shapes=shapes)

