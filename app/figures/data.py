"""The data loader's cursor, its coverage of the corpus, and how much of each batch was read before."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures.frames import series_frame
from app.figures.overlay import line_trace, series_uid
from app.figures.style import SERIES_COLORS, TEMPLATE, base_figure, note_empty
from monitor.schema import (
    DATA_BATCH_REREAD_FRACTION,
    DATA_CURSOR,
    DATA_EPOCH,
    DATA_EXPECTED_UNIQUE_FRACTION,
    DATA_SEEN_2PLUS_FRACTION,
    DATA_SEEN_ONCE_FRACTION,
    DATA_UNIQUE_FRACTION,
)

COVERAGE = (
    (DATA_UNIQUE_FRACTION, "seen ≥ once", None),
    (DATA_SEEN_ONCE_FRACTION, "seen once", None),
    (DATA_SEEN_2PLUS_FRACTION, "seen ≥ twice", None),
    (DATA_EXPECTED_UNIQUE_FRACTION, "planned seen ≥ once", "dash"),
    # A share of each batch, not of the corpus: zero all through a clean first epoch.
    (DATA_BATCH_REREAD_FRACTION, "of each batch: read before", "dot"),
)
# Every key the panel draws.
DATA_KEYS = (DATA_CURSOR, DATA_EPOCH, *(key for key, _, _ in COVERAGE))


def data_figure(data: pd.DataFrame, *, x_title: str = "step",
                empty_reason: str = "no data-loader metrics logged") -> go.Figure:
    """`data` is a long frame (key, step, value [, x]) of the data/* keys."""
    keys = set(data["key"]) if len(data) else set()
    has_cursor = bool(keys & {DATA_CURSOR, DATA_EPOCH})
    has_coverage = any(k in keys for k, _, _ in COVERAGE)
    if not (has_cursor or has_coverage):
        return note_empty(base_figure("data loader", x_title), empty_reason)
    rows = int(has_cursor) + int(has_coverage)
    # With both parts, the coverage lines get a legend of their own above their part: one legend of
    # seven entries would wrap into the panel's title.
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.22 if rows == 2 else 0.08,
                        specs=[[{"secondary_y": True}]] * rows)
    row = 1
    if has_cursor:
        if DATA_CURSOR in keys:
            fig.add_trace(line_trace(series_frame(data, DATA_CURSOR), "cursor (records)", SERIES_COLORS[0],
                                     uid=series_uid("run", DATA_CURSOR)), row=1, col=1)
        if DATA_EPOCH in keys:
            fig.add_trace(line_trace(series_frame(data, DATA_EPOCH), "epoch", SERIES_COLORS[1], dash="dot",
                                     uid=series_uid("run", DATA_EPOCH)), row=1, col=1, secondary_y=True)
            # Ticks as plotly picks them: most pre-training runs stay under one epoch, a bug can reach dozens.
            fig.update_yaxes(title_text="epoch", row=1, col=1, secondary_y=True, showgrid=False, rangemode="tozero",
                             tickmode="auto")
        fig.update_yaxes(title_text="records", row=1, col=1, secondary_y=False)
        row += 1
    if has_coverage:
        legend = "legend2" if has_cursor else "legend"
        for i, (key, label, dash) in enumerate(COVERAGE):
            if key in keys:
                trace = line_trace(series_frame(data, key), label, SERIES_COLORS[2 + i], dash=dash,
                                   uid=series_uid("run", key))
                trace.legend = legend
                fig.add_trace(trace, row=row, col=1)
        fig.update_yaxes(title_text="share", range=[0, 1.02], row=row, col=1, secondary_y=False)
        if has_cursor:
            top = fig.get_subplot(row, 1).yaxis.domain[1]
            fig.update_layout(legend2={**TEMPLATE.layout.legend.to_plotly_json(), "y": top + 0.01})
    fig.update_xaxes(title_text=x_title, row=rows, col=1)
    fig.update_layout(template=TEMPLATE, height=170 + 150 * rows + (60 if rows == 2 else 0),
                      title_text="data loader: cursor and coverage")
    return fig
