"""Plain figure functions: frames in, plotly figures out. No Dash, no store, no clock.

The dashboard and the offline report draw with the same functions; each function's docstring
describes the frames it expects.
"""

from app.figures.alerts import alerts_timeline
from app.figures.data import data_figure
from app.figures.delta import delta_figure
from app.figures.delta_windows import delta_points, reference_delta
from app.figures.evals import downstream_figure
from app.figures.frames import (
    downstream_frame,
    heldout_frame,
    long_frame,
    series_frame,
    train_heldout_gap,
    with_x,
)
from app.figures.grad_norm import grad_norm_figure
from app.figures.heldout import gap_figure, heldout_figure
from app.figures.markers import add_event_markers, add_range_highlight
from app.figures.overlay import loss_overlay
from app.figures.series import picked_series_figure
from app.figures.throughput import throughput_figure

__all__ = [
    "add_event_markers",
    "add_range_highlight",
    "alerts_timeline",
    "reference_delta",
    "data_figure",
    "delta_figure",
    "delta_points",
    "downstream_figure",
    "downstream_frame",
    "gap_figure",
    "grad_norm_figure",
    "heldout_figure",
    "heldout_frame",
    "long_frame",
    "loss_overlay",
    "picked_series_figure",
    "series_frame",
    "throughput_figure",
    "train_heldout_gap",
    "with_x",
]
