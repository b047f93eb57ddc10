"""A run's series drawn over its reference's."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.frames import x_values
from app.figures.style import (
    REFERENCE_COLOR,
    RUN_COLOR,
    base_figure,
    clip_transient,
    line_mode,
    log_y_axis_if_wide,
    note_empty,
    text,
)
from monitor.schema import TRAIN_LOSS

# The logged line behind a smoothed one: there to show the noise, not to be read.
RAW_OPACITY = 0.25


def series_uid(role: str, key: str) -> str:
    """The trace uid of one logged series of a run (`role` "run" or "reference"): a live view finds
    the trace to append new steps to by it. Plotly puts uids into CSS class names, so every
    character but [a-z0-9-] is written as `_<hex>_` (`train/loss` -> `train_2f_loss`)."""
    return f"{role}-" + _UID_UNSAFE.sub(lambda m: f"_{ord(m.group()):x}_", key)


def parse_series_uid(uid: str | None) -> tuple[str, str] | None:
    """(role, key) of a `series_uid`, None for any other uid."""
    if not uid or "-" not in uid:
        return None
    role, encoded = uid.split("-", 1)
    return role, _UID_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), encoded)


_UID_UNSAFE = re.compile(r"[^a-z0-9-]")
_UID_ESCAPE = re.compile(r"_([0-9a-f]+)_")


def line_trace(frame: pd.DataFrame, name: str, color: str, *, dash: str | None = None, width: float = 1.4,
               yaxis: str | None = None, showlegend: bool = True, uid: str | None = None,
               opacity: float | None = None, legendgroup: str | None = None) -> go.Scatter:
    """A line of one series; arrays stay NumPy so plotly sends them as typed arrays.

    Values go as float32: seven significant digits are more than a chart or its hover shows, and
    half the bytes of float64. (x stays as given: token counts need float64's integer range.)
    A point no segment reaches gets a marker (`line_mode`).
    """
    y = frame["value"].to_numpy(dtype=np.float32)
    return go.Scatter(
        x=x_values(frame), y=y, name=text(name), line=dict(color=color, width=width, dash=dash), yaxis=yaxis,
        showlegend=showlegend, hovertemplate="%{y:.4g}", uid=uid, opacity=opacity, legendgroup=legendgroup,
        **line_mode(y, color),
    )


def loss_overlay(run: pd.DataFrame, reference: pd.DataFrame | None = None, *, run_name: str,
                 reference_name: str | None = None, title: str = "train loss", y_title: str = "loss",
                 x_title: str = "step", key: str = TRAIN_LOSS, run_smoothed: pd.DataFrame | None = None,
                 reference_smoothed: pd.DataFrame | None = None, full_y: bool = True,
                 empty_reason: str = "no train loss logged") -> go.Figure:
    """Run and reference (drawn underneath) of one metric, `key`, each in its own colour.

    With `*_smoothed` frames (step, value, x of the smoothed line) the logged line is drawn faintly
    behind its smoothed one. Unless `full_y`, the y range starts after the early transient."""
    fig = base_figure(title, x_title, y_title)
    lines = ((reference, reference_smoothed, f"{reference_name or 'reference'} (reference)", REFERENCE_COLOR,
              "reference"), (run, run_smoothed, run_name, RUN_COLOR, "run"))
    for raw, smooth, name, color, role in lines:
        if raw is None or not len(raw):
            continue
        smoothed = smooth is not None and len(smooth) > 0
        # The logged line keeps its uid (live polling appends to it); the smoothed one is redrawn.
        fig.add_trace(line_trace(raw, name, color, uid=series_uid(role, key), showlegend=not smoothed,
                                 opacity=RAW_OPACITY if smoothed else None, legendgroup=role))
        if smoothed:
            fig.add_trace(line_trace(smooth, f"{name} (smoothed)", color, width=1.8, legendgroup=role))
    if not len(fig.data):
        return note_empty(fig, empty_reason)
    values = np.concatenate([f["value"].to_numpy(dtype=float) for f in (run, reference) if f is not None and len(f)])
    log_y_axis_if_wide(fig, values)  # early loss is 10x the late loss
    if not full_y:
        xs = np.concatenate([x_values(f) for f in (run, reference) if f is not None and len(f)])
        extra = [(x_values(f), f["value"].to_numpy(dtype=float)) for f in (run_smoothed, reference_smoothed)
                 if f is not None and len(f)]
        clip_transient(fig, xs, values, extra=extra)
    return fig
