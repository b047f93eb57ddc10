"""A run's series drawn over its reference's."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.figures.frames import x_values
from monitor.schema import TRAIN_LOSS
from app.figures.style import REFERENCE_COLOR, RUN_COLOR, base_figure, note_empty, text


# Switch to a log axis when the series spans more than this ratio (max/min): below it a linear
# axis shows the late-training detail well enough.
LOG_AXIS_RATIO = 4.0


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
               yaxis: str | None = None, showlegend: bool = True, uid: str | None = None) -> go.Scatter:
    """A line of one series; arrays stay NumPy so plotly sends them as typed arrays.

    Values go as float32: seven significant digits are more than a chart or its hover shows, and
    half the bytes of float64. (x stays as given: token counts need float64's integer range.)
    """
    return go.Scatter(
        x=x_values(frame), y=frame["value"].to_numpy(dtype=np.float32), mode="lines", name=text(name),
        line=dict(color=color, width=width, dash=dash), yaxis=yaxis, showlegend=showlegend,
        hovertemplate="%{y:.4g}", uid=uid,
    )


def loss_overlay(run: pd.DataFrame, reference: pd.DataFrame | None = None, *, run_name: str,
                 reference_name: str | None = None, title: str = "train loss", y_title: str = "loss",
                 x_title: str = "step", key: str = TRAIN_LOSS) -> go.Figure:
    """Run (solid) and reference (grey, drawn underneath) of one metric, `key`."""
    fig = base_figure(title, x_title, y_title)
    if reference is not None and len(reference):
        fig.add_trace(line_trace(reference, f"{reference_name or 'reference'} (reference)", REFERENCE_COLOR,
                                 uid=series_uid("reference", key)))
    if len(run):
        fig.add_trace(line_trace(run, run_name, RUN_COLOR, uid=series_uid("run", key)))
    if not len(fig.data):
        note_empty(fig)
    elif _all_positive(run, reference) and _spans_decades(run, reference):
        # Early loss is 10x the late loss; a log axis keeps the part that matters readable.
        fig.update_yaxes(type="log")
    return fig


def _all_positive(*frames: pd.DataFrame | None) -> bool:
    values = [f["value"].to_numpy(dtype=float) for f in frames if f is not None and len(f)]
    finite = [v[np.isfinite(v)] for v in values]
    return bool(finite) and all(len(v) == 0 or v.min() > 0 for v in finite)



def _spans_decades(*frames: pd.DataFrame | None) -> bool:
    values = np.concatenate([f["value"].to_numpy(dtype=float) for f in frames if f is not None and len(f)])
    values = values[np.isfinite(values)]
    return len(values) > 0 and values.max() / values.min() > LOG_AXIS_RATIO
