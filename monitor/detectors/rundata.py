"""Operations on RunData that detectors and their incremental mode share: one metric's finite
values, column subsets, step slices, and appending rows that arrived later.

All of them keep the types detectors rely on: an int64 `step` index, float columns, and the long
frames of events, repeats and logged NaN/Inf beside the wide one.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from monitor.schema import RunData, RunInfo

from .stats import cadence



def span(run: RunData) -> tuple[float, float]:
    """First and last step of anything in the run (scalars are sorted; events need not be)."""
    ends = []
    if len(run.scalars):
        ends += [float(run.scalars.index[0]), float(run.scalars.index[-1])]
    if len(run.events):
        ev = run.events["step"].to_numpy()
        ends += [float(ev.min()), float(ev.max())]
    return (min(ends), max(ends)) if ends else (0.0, 0.0)


def finite(run: RunData, key: str) -> pd.Series:
    """The finite values of one metric, by step (unlogged cells and logged NaN/Inf dropped)."""
    if key not in run.scalars.columns:
        return pd.Series(dtype=float, index=pd.Index([], dtype="int64", name="step"), name=key)
    col = run.scalars[key]
    if isinstance(col.dtype, pd.SparseDtype):
        col = run.series(key)  # the logged values alone, not a pass over every step
    ok = np.isfinite(col.to_numpy(dtype=float))
    return col if ok.all() else col[ok]


def make_run(info: RunInfo | str, scalars: pd.DataFrame, events: pd.DataFrame | None = None,
             repeats: pd.DataFrame | None = None,
             logged_nonfinite: pd.DataFrame | None = None) -> RunData:
    """A RunData with the index and column types detectors rely on."""
    if isinstance(info, str):
        info = RunInfo(name=info)
    scalars = scalars.copy()
    scalars.index = pd.Index(scalars.index.to_numpy(dtype="int64"), name="step")
    run = RunData(info=info, scalars=scalars.sort_index())
    if events is not None:
        run.events = events
    if repeats is not None:
        run.repeats = repeats
    if logged_nonfinite is not None:
        run.logged_nonfinite = logged_nonfinite
    return run


def restrict_columns(run: RunData, cols: list[str]) -> RunData:
    """Only `cols` (those the run has), and only rows where one of them was logged."""
    cols = [c for c in cols if c in run.scalars.columns]
    scalars = run.scalars[cols]
    logged = ~np.isnan(scalars.to_numpy(dtype=float)).all(axis=1) if cols else np.zeros(len(scalars), dtype=bool)
    nf = run.logged_nonfinite
    if len(nf):
        nf = nf[nf["key"].isin(cols)]
        logged |= scalars.index.isin(nf["step"])
    if not logged.all():
        scalars = scalars[logged]
    rep = run.repeats
    if len(rep):
        rep = rep[rep["key"].isin(cols)]
    return RunData(info=run.info, scalars=scalars, events=run.events, repeats=rep, logged_nonfinite=nf)


def concat_rows(old: RunData, new: RunData) -> RunData:
    """Old rows then new ones; where both logged a (step, key), the new value wins."""
    a, b = old.scalars, new.scalars
    if a.empty:
        scalars = b
    elif b.empty:
        scalars = a
    elif a.index[-1] < b.index[0]:
        scalars = pd.concat([a, b], axis=0)  # the usual case: rows only ever appended
    else:
        scalars = b.combine_first(a).sort_index()
    scalars.index.name = "step"
    events = old.events
    if len(new.events):
        events = _cat(old.events, new.events).sort_values("step", kind="stable").reset_index(drop=True)
    nf = old.logged_nonfinite
    if len(new.logged_nonfinite):
        nf = _cat(nf, new.logged_nonfinite).drop_duplicates(["key", "step"], keep="last").reset_index(drop=True)
    repeats = old.repeats if new.repeats.empty else _cat(old.repeats, new.repeats).reset_index(drop=True)
    return RunData(info=new.info, scalars=scalars, events=events, repeats=repeats, logged_nonfinite=nf)


def _cat(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    if a.empty:
        return b
    if b.empty:
        return a
    return pd.concat([a, b], ignore_index=True)


def slice_rows(run: RunData, lo: float, hi: float) -> RunData:
    """Rows with lo <= step <= hi (scalars, events, repeats and logged NaN/Inf alike)."""
    idx = run.scalars.index
    # Integer bounds: a float searched in an int64 index makes NumPy cast the whole index.
    a = int(idx.searchsorted(math.ceil(lo), side="left")) if math.isfinite(lo) else 0
    b = int(idx.searchsorted(math.floor(hi), side="right")) if math.isfinite(hi) else len(idx)
    return RunData(info=run.info, scalars=run.scalars.iloc[a:b], events=_between(run.events, lo, hi),
                   repeats=_between(run.repeats, lo, hi), logged_nonfinite=_between(run.logged_nonfinite, lo, hi))


def slice_ranges(run: RunData, ranges: list[tuple[float, float]], cols: list[str] | None = None) -> RunData:
    """Rows in any of the (lo, hi) ranges (which may overlap), only `cols` when given."""
    merged: list[list[float]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    parts = [slice_rows(run, lo, hi) for lo, hi in merged]
    if cols is not None:
        parts = [_only_columns(p, cols) for p in parts]
    if len(parts) == 1:
        return parts[0]
    out = parts[0]
    for part in parts[1:]:
        out = concat_rows(out, part)
    return out


def _only_columns(run: RunData, cols: list[str]) -> RunData:
    """`cols` only, rows kept as they are (cheaper than restrict_columns for a reference)."""
    cols = [c for c in cols if c in run.scalars.columns]
    nf, rep = run.logged_nonfinite, run.repeats
    return RunData(info=run.info, scalars=run.scalars[cols], events=run.events,
                   repeats=rep[rep["key"].isin(cols)] if len(rep) else rep,
                   logged_nonfinite=nf[nf["key"].isin(cols)] if len(nf) else nf)


def _between(frame: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    if frame.empty:
        return frame
    steps = frame["step"].to_numpy()
    keep = (steps >= lo) & (steps <= hi)
    return frame if keep.all() else frame[keep]


def trim_columns(run: RunData, keep_from: dict[str, float], keep_first_row: bool = False) -> RunData:
    """Each column only from its own first step to keep (`keep_from`; a column not named is kept
    whole), rows left empty dropped: a sparse eval column can keep its last checkpoints while a dense
    train column keeps only its last few hundred points. With `keep_first_row` the run's very first
    row is kept too."""
    # A sparse column (a long run's evals) is kept dense in the tail, which later updates cut.
    scalars = run.scalars
    steps = scalars.index.to_numpy()
    cut = {col: lo for col, lo in keep_from.items() if col in scalars.columns and math.isfinite(lo)}
    if cut:
        # The columns as one float block, cut in NumPy and framed once: an assignment through .loc
        # a column cost more than the rest of a watch service's update of a short tail.
        values = scalars.to_numpy(dtype=float, copy=True)
        for i, col in enumerate(scalars.columns):
            if col in cut:
                values[steps < cut[col], i] = np.nan
        scalars = pd.DataFrame(values, index=scalars.index, columns=scalars.columns)
    else:
        sparse = {c: "float64" for c, t in scalars.dtypes.items() if isinstance(t, pd.SparseDtype)}
        if sparse:
            scalars = scalars.astype(sparse)
    nf, rep = run.logged_nonfinite, run.repeats
    if len(nf):
        nf = nf[nf["step"].to_numpy() >= nf["key"].map(keep_from).fillna(-math.inf).to_numpy()]
    logged = np.isfinite(scalars.to_numpy(dtype=float)).any(axis=1) | scalars.index.isin(nf["step"])
    if keep_first_row and len(logged):
        logged[0] = True
        if cut:
            scalars.iloc[0] = run.scalars.iloc[0]
    if len(rep):
        rep = rep[rep["step"].to_numpy() >= rep["key"].map(keep_from).fillna(-math.inf).to_numpy()]
    first = float(scalars.index[logged][0]) if logged.any() else math.inf
    events = _between(run.events, first, math.inf)
    return RunData(info=run.info, scalars=scalars[logged], events=events, repeats=rep.reset_index(drop=True),
                   logged_nonfinite=nf.reset_index(drop=True))


def last_points_from(run: RunData, column: str, points: int | None) -> float:
    """The step of the `points`-th last logged value of `column` (-inf: keep all of it)."""
    if points is None or column not in run.scalars.columns:
        return -math.inf
    logged = run.scalars.index[np.isfinite(run.scalars[column].to_numpy(dtype=float))]
    return float(logged[-points]) if len(logged) > points else -math.inf


def with_pinned(run: RunData, pinned: dict) -> RunData:
    """The run with facts pinned by earlier judgements of its first rows (see `pinned`)."""
    if not pinned:
        return run
    info = dataclasses.replace(run.info, pinned=dict(pinned))
    return RunData(info=info, scalars=run.scalars, events=run.events, repeats=run.repeats,
                   logged_nonfinite=run.logged_nonfinite)


def logging_interval(run: RunData, column: str, points: int) -> float | None:
    """The usual spacing of `column`'s first `points` logged steps, which fixes the width of the
    windows a detector cuts it into: the value the incremental mode pinned (RunInfo.pinned)
    (whose tail no longer holds the first steps) where there is one, else measured on the run;
    None until that many steps are logged."""
    fixed = pinned(run, f"interval:{column}@{points}")
    if fixed is not None:
        return float(fixed)
    if column not in run.scalars.columns:
        return None
    logged = run.scalars.index[np.isfinite(run.scalars[column].to_numpy(dtype=float))].to_numpy()
    if logged.size < points:
        return None
    return cadence(logged[:points])


def pinned(run: RunData, key: str):
    """A fact the incremental mode pinned for this judgement (None when judging a whole run)."""
    return run.info.pinned.get(key)
