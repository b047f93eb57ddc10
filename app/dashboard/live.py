"""Live updates of an open run page: what polling appends, and when it redraws instead.

The page keeps a small state (this module's dict): each series' last drawn step, which trace of
which panel draws it, and what has been appended since the last full render. A poll reads only
steps after those (`since_step`), and hands back `extendData`-style updates per panel. It asks for
a full render instead when appending would mislead or grow without bound: new held-out or eval
points (derived panels change), new events or detections (markers change), more appended points
than half the point budget, or new points after `full_refresh_s` since the last render (the
downsampling is redone). A zoomed view is a fixed range: it is not appended to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.dashboard.panels import RenderedView
from app.dashboard.queries import SPARSE_PREFIXES, ViewData, axis_for, new_points
from monitor.jsonutil import plain
from monitor.store import Store


@dataclass
class LiveUpdate:
    append: dict | None  # panel -> [{"x": [[...]], "y": [[...]]}, [trace indices]]
    refresh: bool
    alerts_changed: bool
    state: dict


def initial_state(store: Store, view: ViewData, rendered: RenderedView, now: float) -> dict:
    ref = view.reference
    return {
        "run": view.run.name,
        "reference": ref.name if ref is not None else None,
        "axis": view.axis_kind,
        "fixed_range": view.step_range is not None,
        "last": {"run": view.run.last_steps(), "reference": ref.last_steps() if ref is not None else {}},
        "keys": {"run": view.run.keys, "reference": ref.keys if ref is not None else []},
        "traces": rendered.traces,
        "run_end_x": float(view.run.long["x"].max()) if len(view.run.long) else None,
        "appended": 0,
        "rendered_at": now,
        "signature": store.activity(view.run.name),
    }


def poll(store: Store, state: dict, *, max_points: int, full_refresh_s: float, now: float) -> LiveUpdate:
    signature = store.activity(state["run"])
    old = state["signature"]
    # The alert list shows stored detections too: new ones from `detect` redraw it.
    alerts_changed = signature[1] != old[1] or signature[2] != old[2]
    markers_changed = signature[0] != old[0] or signature[1] != old[1]
    state = {**state, "signature": signature}
    if state["fixed_range"]:
        return LiveUpdate(None, markers_changed, alerts_changed, state)

    run_new = _fresh(store, state, "run", max_points)
    if run_new is None:
        return LiveUpdate(None, True, alerts_changed, state)
    ref_new = None
    if state["reference"] is not None:
        ref_new = _fresh(store, state, "reference", max_points)
        if ref_new is None:
            return LiveUpdate(None, True, alerts_changed, state)
        # Only as far as the run has got: the reference's future is not part of a live view.
        run_end = _run_end_x(state, run_new)
        if len(ref_new):
            ref_new = ref_new[ref_new["x"] <= run_end] if run_end is not None else ref_new.iloc[0:0]
    added = len(run_new) + (len(ref_new) if ref_new is not None else 0)
    if added == 0:
        return LiveUpdate(None, markers_changed, alerts_changed, state)
    appended = state["appended"] + added
    if markers_changed or appended > max_points // 2 or now - state["rendered_at"] > full_refresh_s:
        return LiveUpdate(None, True, alerts_changed, state)

    frames = {"run": run_new, "reference": ref_new}
    last = {role: dict(state["last"][role]) for role in ("run", "reference")}
    append: dict[str, list] = {}
    for panel, traces in state["traces"].items():
        xs, ys, indices = [], [], []
        for index, role, key in traces:
            frame = frames.get(role)
            if frame is None or not len(frame):
                continue
            rows = frame[frame["key"] == key]
            if not len(rows):
                continue
            xs.append(_json_numbers(rows["x"].to_numpy()))
            ys.append(_json_numbers(rows["value"].to_numpy()))
            indices.append(index)
            last[role][key] = int(rows["step"].max())
        if indices:
            append[panel] = [{"x": xs, "y": ys}, indices]
    for role, frame in frames.items():
        if frame is not None and len(frame):
            for key, step in frame.groupby("key")["step"].max().items():
                last[role][key] = max(int(step), last[role].get(key, -1))
    state = {**state, "last": last, "appended": appended, "run_end_x": _run_end_x(state, run_new)}
    return LiveUpdate(append or None, False, alerts_changed, state)


def _fresh(store: Store, state: dict, role: str, max_points: int) -> pd.DataFrame | None:
    """New rows of one run with their x; None when a sparse series (held-out, evals) or a series
    never drawn before got rows, which only a full render can place."""
    name = state[role]
    last = state["last"][role]
    keys = state["keys"][role]
    unseen = [k for k in store.list_keys(name) if k in keys and k not in last]
    # A key with no drawn point yet starts from the beginning: ask from step -1.
    rows = new_points(store, name, {**{k: -1 for k in unseen}, **last}, max_points)
    if not len(rows):
        return rows.assign(x=pd.Series(dtype=float))
    if unseen and rows["key"].isin(unseen).any():
        return None
    if rows["key"].str.startswith(SPARSE_PREFIXES).any():
        return None
    axis = axis_for(store, store.run_info(name), state["axis"])
    if axis is None:
        return None
    return rows.assign(x=axis.to_x(rows["step"].to_numpy()))


def _run_end_x(state: dict, run_new: pd.DataFrame) -> float | None:
    """The furthest x the run has reached, drawn or new."""
    ends = [e for e in (state.get("run_end_x"), float(run_new["x"].max()) if len(run_new) else None) if e is not None]
    return max(ends) if ends else None


def _json_numbers(values: np.ndarray) -> list:
    """Plain floats for JSON; NaN and Inf (logged as such) become null, a gap in the line."""
    return plain(np.asarray(values, dtype=float))
