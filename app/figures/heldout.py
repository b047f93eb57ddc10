"""Held-out loss at checkpoints with error bars, and the train–held-out gap against the reference's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.frames import x_values
from app.figures.style import (
    REFERENCE_COLOR,
    RUN_COLOR,
    SET_SYMBOLS,
    base_figure,
    clip_transient,
    note_empty,
    side_legend,
    text,
    ticks_at_few_points,
)


# Legend swatches of the sets: the marker alone, in a colour of neither run.
SET_KEY_COLOR = "#555555"


def _points(frame: pd.DataFrame, y_col: str, name: str, color: str, *, dash: str | None, group: str,
            symbol: str, stderr: np.ndarray | None = None) -> go.Scatter:
    error = None
    if stderr is not None and np.isfinite(stderr).any():
        error = dict(type="data", array=np.nan_to_num(stderr, nan=0.0), visible=True, thickness=1.2, width=3)
    return go.Scatter(
        x=x_values(frame), y=frame[y_col].to_numpy(dtype=float), mode="lines+markers", name=name,
        legendgroup=group, showlegend=False, line=dict(color=color, width=1.4, dash=dash),
        marker=dict(size=6, color=color, symbol=symbol), error_y=error, hovertemplate="%{y:.4f}",
    )


def _key(name: str, *, group: str, line: dict | None = None, symbol: str | None = None) -> go.Scatter:
    """A legend entry with no points of its own."""
    marker = dict(size=7, color=SET_KEY_COLOR, symbol=symbol) if symbol else None
    return go.Scatter(x=[None], y=[None], mode="markers" if symbol else "lines", name=name, legendgroup=group,
                      line=line, marker=marker, hoverinfo="skip")


def _add_sets(fig: go.Figure, run: pd.DataFrame, reference: pd.DataFrame, y_col: str, *, run_name: str,
              reference_name: str | None, stderr: bool) -> None:
    """One line per set and run, in the run's or the reference's colour, a marker per set. The
    legend names each run once (its colour and dash) and each set once (its marker; a click hides
    both runs' lines of it): 11 sets of two runs are 13 short entries, not 22 long ones."""
    sets = sorted(set(run["set"]) | set(reference["set"]))
    runs = [(frame, who, color, dash) for frame, who, color, dash in
            ((reference, reference_name or "reference", REFERENCE_COLOR, "dash"), (run, run_name, RUN_COLOR, None))
            if len(frame)]
    for _, who, color, dash in runs:
        fig.add_trace(_key(text(who), group=f"run:{who}", line=dict(color=color, width=1.8, dash=dash)))
    for i, name in enumerate(sets):
        symbol = SET_SYMBOLS[i % len(SET_SYMBOLS)]
        fig.add_trace(_key(text(name), group=name, symbol=symbol))
        for frame, who, color, dash in runs:
            part = frame[frame["set"] == name]
            if len(part):
                fig.add_trace(_points(part, y_col, f"{text(name)} · {text(who)}", color, dash=dash, group=name,
                                      symbol=symbol, stderr=part["stderr"].to_numpy(dtype=float) if stderr else None))


def heldout_figure(run: pd.DataFrame, reference: pd.DataFrame | None = None, *, run_name: str,
                   reference_name: str | None = None, x_title: str = "step", full_y: bool = True,
                   sets: Sequence[str] | None = None,
                   empty_reason: str = "no held-out evaluations logged") -> go.Figure:
    """Frames (set, step, loss, stderr): the run's colour and the reference's, one marker per set.
    `sets` picks the sets drawn (default: all); the title says how many of the logged ones they
    are when some are left out, as the downstream panel counts its metrics."""
    title = "held-out loss at checkpoints (±1 s.e.)"
    reference = reference if reference is not None else run.iloc[0:0]
    if sets is not None:
        logged = set(run["set"]) | set(reference["set"])
        run, reference = run[run["set"].isin(sets)], reference[reference["set"].isin(sets)]
        drawn = set(run["set"]) | set(reference["set"])
        if len(drawn) < len(logged):
            title += f" — {len(drawn)} of {len(logged)} sets"
    fig = base_figure(title, x_title, "loss", height=340)
    if not len(run) and not len(reference):
        return note_empty(fig, empty_reason)
    _add_sets(fig, run, reference, "loss", run_name=run_name, reference_name=reference_name, stderr=True)
    ticks_at_few_points(fig, np.concatenate([x_values(f) for f in (run, reference) if len(f)]))
    if not full_y:
        both = pd.concat([run, reference], ignore_index=True)
        clip_transient(fig, x_values(both), both["loss"].to_numpy(dtype=float))
    return side_legend(fig)


def gap_figure(run_gap: pd.DataFrame, reference_gap: pd.DataFrame | None = None, *, run_name: str,
               reference_name: str | None = None, x_title: str = "step", full_y: bool = True,
               empty_reason: str = "no held-out evaluations within the train loss range") -> go.Figure:
    """Frames (set, step, gap): held-out minus train loss. A run whose gap widens while the
    reference's does not is fitting its training data more than the reference did. The gap at step
    0 (an untrained model's held-out loss against its first train steps) can be ten nats: without
    `full_y` the y range opens after the early transient, as the loss panels' do."""
    fig = base_figure("train–held-out gap (held-out − train)", x_title, "Δ loss", height=300)
    reference_gap = reference_gap if reference_gap is not None else run_gap.iloc[0:0]
    if not len(run_gap) and not len(reference_gap):
        return note_empty(fig, empty_reason)
    _add_sets(fig, run_gap, reference_gap, "gap", run_name=run_name, reference_name=reference_name, stderr=False)
    ticks_at_few_points(fig, np.concatenate([x_values(f) for f in (run_gap, reference_gap) if len(f)]))
    if not full_y:
        both = pd.concat([run_gap, reference_gap], ignore_index=True)
        clip_transient(fig, x_values(both), both["gap"].to_numpy(dtype=float))
    return side_legend(fig)
