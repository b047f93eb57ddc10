"""Pure frame helpers that put store output or a RunData into the shapes the figures draw.

No figure is built here and nothing is read: the dashboard and the report both call these on frames
they already have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from monitor.schema import DOWNSTREAM_PREFIX, HELDOUT_PREFIX, RunData, empty_long

GAP_TRAIN_POINTS = 50
"""Train points on each side of a checkpoint whose median the train–held-out gap is taken against."""


def series_frame(source: pd.DataFrame | pd.Series, key: str | None = None, run: str | None = None) -> pd.DataFrame:
    """One metric as a frame (step, value [, x]), sorted by step.

    `source` is a long frame (read_scalars' output, or key/step/value) filtered by `key` and `run`,
    or a Series indexed by step such as `RunData.series(key)`.
    """
    if isinstance(source, pd.Series):
        out = pd.DataFrame({"step": source.index.to_numpy(dtype="int64"), "value": source.to_numpy(dtype=float)})
        return out.sort_values("step", kind="stable").reset_index(drop=True)
    mask = np.ones(len(source), dtype=bool)
    if key is not None and "key" in source:
        mask &= (source["key"] == key).to_numpy()
    if run is not None and "run" in source:
        mask &= (source["run"] == run).to_numpy()
    cols = ["step", "value"] + (["x"] if "x" in source else [])
    out = source.loc[mask, cols]
    return out.sort_values("step", kind="stable").reset_index(drop=True)


def long_frame(run_data: RunData, keys: Iterable[str] | None = None) -> pd.DataFrame:
    """A RunData's metrics as a long frame (key, step, value), logged values only."""
    wanted = list(keys) if keys is not None else list(run_data.scalars.columns)
    parts = []
    for key in wanted:
        s = run_data.series(key)
        parts.append(pd.DataFrame({"key": key, "step": s.index.to_numpy(dtype="int64"), "value": s.to_numpy(dtype=float)}))
    if not parts:
        return empty_long()
    return pd.concat(parts, ignore_index=True)


def with_x(frame: pd.DataFrame, x_of_step: Callable[[np.ndarray], np.ndarray], column: str = "step") -> pd.DataFrame:
    """A copy of `frame` with column `x` = x_of_step(frame[column]) (e.g. steps to tokens)."""
    out = frame.copy()
    out["x"] = np.asarray(x_of_step(out[column].to_numpy()), dtype=float) if len(out) else np.empty(0)
    return out


def x_values(frame: pd.DataFrame) -> np.ndarray:
    """The x to plot: column `x` when the caller mapped steps to another axis, else the step."""
    return frame["x"].to_numpy() if "x" in frame else frame["step"].to_numpy()


def heldout_frame(long: pd.DataFrame) -> pd.DataFrame:
    """Held-out losses as (set, step, loss, stderr [, x]) from `eval/heldout/<set>/{loss,stderr}` rows."""
    return _stat_frame(long, HELDOUT_PREFIX, "set", "loss", value_stat="loss")


def downstream_frame(long: pd.DataFrame) -> pd.DataFrame:
    """Downstream evals as (task, step, value, stderr [, x]), task = `<task>/<metric>`."""
    return _stat_frame(long, DOWNSTREAM_PREFIX, "task", "value", value_stat=None)


def _stat_frame(long: pd.DataFrame, prefix: str, name_col: str, value_col: str, value_stat: str | None) -> pd.DataFrame:
    extra = ["x"] if "x" in long else []
    empty = pd.DataFrame({name_col: pd.Series(dtype=str), "step": pd.Series(dtype="int64"),
                          value_col: pd.Series(dtype=float), "stderr": pd.Series(dtype=float),
                          **{c: pd.Series(dtype=float) for c in extra}})
    if not len(long):
        return empty
    # Pick the keys first and filter rows by membership: string operations on every row of a
    # long frame (tens of thousands) cost far more than on its few distinct keys.
    keys = [k for k in long["key"].unique() if k.startswith(prefix)]
    rows = long[long["key"].isin(keys)]
    if not len(rows):
        return empty
    # Names and stats per distinct key, then mapped onto the rows.
    names, roles = {}, {}
    for key in keys:
        rest = key[len(prefix):]
        head, slash, stat = rest.rpartition("/")
        if value_stat is not None:
            # eval/heldout/<set>/<stat>
            names[key] = head if slash else rest
            roles[key] = ("value" if stat == value_stat else "stderr" if stat == "stderr" else "") if slash else ""
        else:
            # eval/downstream/<task>/<metric>[/stderr|/n]
            error_bar = slash and stat in ("stderr", "n")
            names[key] = head if error_bar else rest
            roles[key] = ("stderr" if stat == "stderr" else "") if error_bar else "value"
    role = rows["key"].map(roles)
    name = rows["key"].map(names)
    value_mask, stderr_mask = (role == "value").to_numpy(), (role == "stderr").to_numpy()
    values = rows.loc[value_mask, ["step", "value"] + extra].assign(**{name_col: name[value_mask]})
    values = values.rename(columns={"value": value_col})
    errs = rows.loc[stderr_mask, ["step", "value"]].assign(**{name_col: name[stderr_mask]})
    errs = errs.rename(columns={"value": "stderr"})
    out = values.merge(errs, on=[name_col, "step"], how="left")
    if not len(out):
        return empty
    return out[[name_col, "step", value_col, "stderr", *extra]].sort_values([name_col, "step"]).reset_index(drop=True)


def train_heldout_gap(train: pd.DataFrame, heldout: pd.DataFrame) -> pd.DataFrame:
    """Held-out loss minus train loss at each checkpoint, per set: (set, step, gap [, x]).

    One step's train loss scatters by several times the gap this panel is for (bench/RESULTS.md
    measures both on a real 1.5B pair), so `train` should be local means (the dashboard passes the store's bucket means), and the train
    loss set against a checkpoint is the median of the train points nearest it: up to
    GAP_TRAIN_POINTS on each side, none nearer another checkpoint. A checkpoint with no train point
    near it is left out rather than extrapolated to.
    """
    extra = ["x"] if "x" in heldout else []
    empty = pd.DataFrame({"set": pd.Series(dtype=str), "step": pd.Series(dtype="int64"),
                          "gap": pd.Series(dtype=float), **{c: pd.Series(dtype=float) for c in extra}})
    ts = train["step"].to_numpy(dtype=float)
    tv = train["value"].to_numpy(dtype=float)
    keep = np.isfinite(tv)
    ts, tv = ts[keep], tv[keep]
    if len(ts) == 0 or not len(heldout):
        return empty
    checkpoints = np.unique(heldout["step"].to_numpy(dtype=float))
    halfway = (checkpoints[1:] + checkpoints[:-1]) / 2
    at = np.searchsorted(ts, checkpoints, side="right")
    lo = np.maximum(np.searchsorted(ts, np.r_[-np.inf, halfway], side="right"), at - GAP_TRAIN_POINTS)
    hi = np.minimum(np.searchsorted(ts, np.r_[halfway, np.inf], side="right"), at + GAP_TRAIN_POINTS)
    level = pd.Series([np.median(tv[a:b]) if b > a else np.nan for a, b in zip(lo, hi)], index=checkpoints)
    gap = heldout["loss"].to_numpy(dtype=float) - level.reindex(heldout["step"].to_numpy(dtype=float)).to_numpy()
    out = heldout[["set", "step", *extra]].assign(gap=gap)[np.isfinite(gap)]
    return out[["set", "step", "gap", *extra]].reset_index(drop=True)
