"""The y range a loss panel opens with: the curve after its early transient.

A loss curve starts an order of magnitude above where it spends the run (a held-out loss of 22 at
step 0, 3.2 from step 500 on); a range that includes the start flattens everything a person reads.
By default the range covers the values after the first TRANSIENT_SHARE of the x span drawn, with
a margin; the page's "include the start" toggle draws the whole range instead.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

TRANSIENT_SHARE = 0.05
MARGIN = 0.05


def steady_range(x: np.ndarray, y: np.ndarray, *, extra: list[tuple[np.ndarray, np.ndarray]] = (),
                 log: bool = False) -> tuple[float, float] | None:
    """(lo, hi) of `y` where x is past the transient, with the `extra` lines' (x, y) past it inside
    too (smoothed lines); in log10 units when `log` (plotly's range for a log axis). None when
    nothing is left or the transient sets no limit (then the default range is right)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & ((y > 0) if log else True)
    if ok.sum() < 2:
        return None
    x, y = x[ok], y[ok]
    cut = x.min() + TRANSIENT_SHARE * (x.max() - x.min())
    steady = y[x >= cut]
    if len(steady) < 2:
        return None
    # Whole min and max of the rest: a spike after the transient is what a person must see.
    lo, hi = float(steady.min()), float(steady.max())
    for ex, ey in extra:
        ex, v = np.asarray(ex, dtype=float), np.asarray(ey, dtype=float)
        v = v[(ex >= cut) & np.isfinite(v) & ((v > 0) if log else True)]
        if len(v):
            lo, hi = min(lo, v.min()), max(hi, v.max())
    if hi >= y.max() and lo <= y.min():
        return None  # the transient sets no limit: nothing to clip
    if log:
        lo, hi = np.log10(lo), np.log10(hi)
    pad = MARGIN * (hi - lo if hi > lo else abs(hi) or 1.0)
    return float(lo - pad), float(hi + pad)


def clip_transient(fig: go.Figure, x: np.ndarray, y: np.ndarray, *,
                   extra: list[tuple[np.ndarray, np.ndarray]] = ()) -> go.Figure:
    """Set the figure's y range to `steady_range` (on its log or linear axis)."""
    log = fig.layout.yaxis.type == "log"
    span = steady_range(x, y, extra=extra, log=log)
    if span is not None:
        fig.update_yaxes(range=list(span), autorange=False)
    return fig
