"""Any logged series a person picks (the learning rate, a DPO reward margin, a custom metric): one
small panel each, the run over its reference, on linear axes, as W&B and TensorBoard draw any key
they were given."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.frames import series_frame
from app.figures.overlay import line_trace, series_uid
from app.figures.style import REFERENCE_COLOR, RUN_COLOR, base_figure, note_empty, small_multiples_layout, text

COLUMNS = 2
# Past this many small panels none is readable: the rest of a pick waits for a narrower one.
MAX_SERIES = 8
TITLE = "picked series"


def picked_series_figure(run: pd.DataFrame, reference: pd.DataFrame | None, keys: Sequence[str], *,
                         run_name: str, reference_name: str | None = None, x_title: str = "step",
                         empty_reason: str = "none of the picked series has a value here") -> go.Figure:
    """Long frames (key, step, value[, x]) of the two runs; one panel per key of `keys` (the
    first MAX_SERIES), the reference dashed underneath the run. Each line carries its `series_uid`,
    so a live view appends new steps to it."""
    reference = reference if reference is not None else run.iloc[0:0]
    chosen = list(dict.fromkeys(keys))[:MAX_SERIES]
    drawn = [k for k in chosen if (run["key"] == k).any() or (reference["key"] == k).any()]
    if not drawn:
        return note_empty(base_figure(TITLE, x_title), empty_reason)
    rows = math.ceil(len(drawn) / COLUMNS)
    cols = min(COLUMNS, len(drawn))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[text(k) for k in drawn],
                        horizontal_spacing=0.08, vertical_spacing=0.18 if rows > 1 else 0.1)
    for i, key in enumerate(drawn):
        row, col = i // COLUMNS + 1, i % COLUMNS + 1
        for frame, name, color, dash, role in ((reference, f"{reference_name or 'reference'} (reference)",
                                                REFERENCE_COLOR, "dash", "reference"),
                                               (run, run_name, RUN_COLOR, None, "run")):
            part = series_frame(frame, key)
            if not len(part):
                continue
            fig.add_trace(line_trace(part, name, color, dash=dash, uid=series_uid(role, key), showlegend=i == 0,
                                     legendgroup=role), row=row, col=col)
    more = len(list(dict.fromkeys(keys))) - len(chosen)
    title = TITLE + (f" — the first {MAX_SERIES} of {MAX_SERIES + more}" if more > 0 else "")
    empty = [k for k in chosen if k not in drawn]
    if empty:  # a pick with no finite value here says so, rather than vanishing from the grid
        title += f" — no finite value here: {text(', '.join(empty))}"
    small_multiples_layout(fig, title=title, rows=rows, panels=len(drawn), columns=COLUMNS, x_title=x_title,
                           base_height=160, row_height=220, top=90)
    return fig
