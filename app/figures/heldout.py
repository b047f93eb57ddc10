"""Held-out loss at checkpoints with error bars, and the train–held-out gap against the reference's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.frames import x_values
from app.figures.style import SERIES_COLORS, base_figure, note_empty, text


def _points(frame: pd.DataFrame, y_col: str, name: str, color: str, *, dash: str | None, group: str,
            stderr: np.ndarray | None = None) -> go.Scatter:
    error = None
    if stderr is not None and np.isfinite(stderr).any():
        error = dict(type="data", array=np.nan_to_num(stderr, nan=0.0), visible=True, thickness=1.2, width=3)
    return go.Scatter(
        x=x_values(frame), y=frame[y_col].to_numpy(dtype=float), mode="lines+markers", name=name,
        legendgroup=group, line=dict(color=color, width=1.4, dash=dash), marker=dict(size=5, color=color),
        error_y=error, hovertemplate="%{y:.4f}",
    )


def heldout_figure(run: pd.DataFrame, reference: pd.DataFrame | None = None, *, run_name: str,
                   reference_name: str | None = None, x_title: str = "step") -> go.Figure:
    """Frames (set, step, loss, stderr): one colour per set, run solid, reference dashed."""
    fig = base_figure("held-out loss at checkpoints (±1 s.e.)", x_title, "loss", height=340)
    reference = reference if reference is not None else run.iloc[0:0]
    sets = sorted(set(run["set"]) | set(reference["set"]))
    if not sets:
        return note_empty(fig, "no held-out evaluations logged")
    for i, name in enumerate(sets):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        ref = reference[reference["set"] == name]
        if len(ref):
            fig.add_trace(_points(ref, "loss", f"{text(name)} · {text(reference_name or 'reference')}", color,
                                  dash="dash", group=name, stderr=ref["stderr"].to_numpy(dtype=float)))
        own = run[run["set"] == name]
        if len(own):
            fig.add_trace(_points(own, "loss", f"{text(name)} · {text(run_name)}", color, dash=None, group=name,
                                  stderr=own["stderr"].to_numpy(dtype=float)))
    return fig


def gap_figure(run_gap: pd.DataFrame, reference_gap: pd.DataFrame | None = None, *, run_name: str,
               reference_name: str | None = None, x_title: str = "step") -> go.Figure:
    """Frames (set, step, gap): held-out minus train loss. A run whose gap widens while the
    reference's does not is fitting its training data more than the reference did."""
    fig = base_figure("train–held-out gap (held-out − train)", x_title, "Δ loss", height=300)
    reference_gap = reference_gap if reference_gap is not None else run_gap.iloc[0:0]
    sets = sorted(set(run_gap["set"]) | set(reference_gap["set"]))
    if not sets:
        return note_empty(fig, "no held-out evaluations within the train loss range")
    for i, name in enumerate(sets):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        ref = reference_gap[reference_gap["set"] == name]
        if len(ref):
            fig.add_trace(_points(ref, "gap", f"{text(name)} · {text(reference_name or 'reference')}", color,
                                  dash="dash", group=name))
        own = run_gap[run_gap["set"] == name]
        if len(own):
            fig.add_trace(_points(own, "gap", f"{text(name)} · {text(run_name)}", color, dash=None, group=name))
    return fig
