"""Downstream evals: one small panel per task metric, run against reference, with error bars; a
lower-is-better metric that spans decades (perplexity from millions at the start) on a log axis."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from monitor.detectors.eval_keys import lower_is_better

from app.figures.frames import x_values
from app.figures.style import (
    REFERENCE_COLOR,
    RUN_COLOR,
    base_figure,
    log_y_axis_if_wide,
    note_empty,
    small_multiples_layout,
    text,
    ticks_at_few_points,
)

# Panels per row, and the most tasks drawn at once: past a dozen small panels none is readable.
COLUMNS = 3
DEFAULT_MAX_TASKS = 6


def downstream_figure(run: pd.DataFrame, reference: pd.DataFrame | None = None, *, run_name: str,
                      reference_name: str | None = None, tasks: Sequence[str] | None = None,
                      max_tasks: int = DEFAULT_MAX_TASKS, x_title: str = "step",
                      empty_reason: str = "no downstream evals logged") -> go.Figure:
    """Frames (task, step, value, stderr). `tasks` picks which panels; default: the first tasks
    (alphabetically) up to `max_tasks`."""
    reference = reference if reference is not None else run.iloc[0:0]
    available = sorted(set(run["task"]) | set(reference["task"]))
    chosen = [t for t in (tasks if tasks is not None else available) if t in available][:max_tasks]
    if not chosen:
        return note_empty(base_figure("downstream evals (±1 s.e.)", x_title), empty_reason)
    rows = math.ceil(len(chosen) / COLUMNS)
    cols = min(COLUMNS, len(chosen))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[text(t) for t in chosen],
                        horizontal_spacing=0.07, vertical_spacing=0.16 if rows > 1 else 0.1)
    for i, task in enumerate(chosen):
        row, col = i // COLUMNS + 1, i % COLUMNS + 1
        for frame, name, color, dash in ((reference, reference_name or "reference", REFERENCE_COLOR, "dash"),
                                         (run, run_name, RUN_COLOR, None)):
            part = frame[frame["task"] == task]
            if not len(part):
                continue
            stderr = part["stderr"].to_numpy(dtype=float)
            fig.add_trace(go.Scatter(
                x=x_values(part), y=part["value"].to_numpy(dtype=float), mode="lines+markers", name=text(name),
                legendgroup=name, showlegend=i == 0, line=dict(color=color, width=1.3, dash=dash),
                marker=dict(size=5, color=color), hovertemplate="%{y:.4f}",
                error_y=dict(type="data", array=np.nan_to_num(stderr, nan=0.0), visible=True, thickness=1.1, width=3)
                if np.isfinite(stderr).any() else None,
            ), row=row, col=col)
        ticks_at_few_points(fig, np.concatenate([x_values(f[f["task"] == task]) for f in (run, reference) if len(f)]),
                            row=row, col=col)
        if lower_is_better(task.rsplit("/", 1)[-1]):  # perplexity falls from millions at the start
            values = np.concatenate([f.loc[f["task"] == task, "value"].to_numpy(dtype=float) for f in (run, reference)])
            log_y_axis_if_wide(fig, values, row=row, col=col)
    more = len(available) - len(chosen)
    title = "downstream evals (±1 s.e.)" + (f" — {len(chosen)} of {len(available)} metrics" if more > 0 else "")
    small_multiples_layout(fig, title=title, rows=rows, panels=len(chosen), columns=COLUMNS, x_title=x_title,
                           base_height=200, row_height=190, top=100)
    return fig
