"""Held-out loss at checkpoints with error bars, and the train–held-out gap against the reference's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.frames import x_values
from app.figures.style import REFERENCE_COLOR, RUN_COLOR, SET_SYMBOLS, base_figure, note_empty, side_legend, text
from app.figures.yrange import clip_transient


def _points(frame: pd.DataFrame, y_col: str, name: str, color: str, *, dash: str | None, group: str,
            symbol: str, stderr: np.ndarray | None = None) -> go.Scatter:
    error = None
    if stderr is not None and np.isfinite(stderr).any():
        error = dict(type="data", array=np.nan_to_num(stderr, nan=0.0), visible=True, thickness=1.2, width=3)
    return go.Scatter(
        x=x_values(frame), y=frame[y_col].to_numpy(dtype=float), mode="lines+markers", name=name,
        legendgroup=group, line=dict(color=color, width=1.4, dash=dash), marker=dict(size=6, color=color, symbol=symbol),
        error_y=error, hovertemplate="%{y:.4f}",
    )


def heldout_figure(run: pd.DataFrame, reference: pd.DataFrame | None = None, *, run_name: str,
                   reference_name: str | None = None, x_title: str = "step", full_y: bool = True,
                   empty_reason: str = "no held-out evaluations logged") -> go.Figure:
    """Frames (set, step, loss, stderr): the run's colour and the reference's, one marker per set."""
    fig = base_figure("held-out loss at checkpoints (±1 s.e.)", x_title, "loss", height=340)
    reference = reference if reference is not None else run.iloc[0:0]
    sets = sorted(set(run["set"]) | set(reference["set"]))
    if not sets:
        return note_empty(fig, empty_reason)
    for i, name in enumerate(sets):
        symbol = SET_SYMBOLS[i % len(SET_SYMBOLS)]
        ref = reference[reference["set"] == name]
        if len(ref):
            fig.add_trace(_points(ref, "loss", f"{text(name)} · {text(reference_name or 'reference')}",
                                  REFERENCE_COLOR, dash="dash", group=name, symbol=symbol,
                                  stderr=ref["stderr"].to_numpy(dtype=float)))
        own = run[run["set"] == name]
        if len(own):
            fig.add_trace(_points(own, "loss", f"{text(name)} · {text(run_name)}", RUN_COLOR, dash=None, group=name,
                                  symbol=symbol, stderr=own["stderr"].to_numpy(dtype=float)))
    if not full_y:
        both = pd.concat([run, reference], ignore_index=True)
        clip_transient(fig, x_values(both), both["loss"].to_numpy(dtype=float))
    return side_legend(fig)


def gap_figure(run_gap: pd.DataFrame, reference_gap: pd.DataFrame | None = None, *, run_name: str,
               reference_name: str | None = None, x_title: str = "step",
               empty_reason: str = "no held-out evaluations within the train loss range") -> go.Figure:
    """Frames (set, step, gap): held-out minus train loss. A run whose gap widens while the
    reference's does not is fitting its training data more than the reference did."""
    fig = base_figure("train–held-out gap (held-out − train)", x_title, "Δ loss", height=300)
    reference_gap = reference_gap if reference_gap is not None else run_gap.iloc[0:0]
    sets = sorted(set(run_gap["set"]) | set(reference_gap["set"]))
    if not sets:
        return note_empty(fig, empty_reason)
    for i, name in enumerate(sets):
        symbol = SET_SYMBOLS[i % len(SET_SYMBOLS)]
        ref = reference_gap[reference_gap["set"] == name]
        if len(ref):
            fig.add_trace(_points(ref, "gap", f"{text(name)} · {text(reference_name or 'reference')}",
                                  REFERENCE_COLOR, dash="dash", group=name, symbol=symbol))
        own = run_gap[run_gap["set"] == name]
        if len(own):
            fig.add_trace(_points(own, "gap", f"{text(name)} · {text(run_name)}", RUN_COLOR, dash=None, group=name,
                                  symbol=symbol))
    return side_legend(fig)
