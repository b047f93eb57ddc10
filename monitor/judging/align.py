"""Putting a run and its reference on one axis, so that every compared value is a fair pair.

`align_pair(run, reference)` returns both runs re-expressed on the run's steps:

Axis
* `step`: a reference step is the same step of the run.
* `tokens`: the reference is placed where the run had consumed the same number of tokens, so a
  reference with twice the batch size lands its step k on the run's step 2k. A run's tokens come
  from its `train/tokens` series when it logged one (exact even when the batch size changed during
  training), else from `RunInfo.tokens_per_step` as step x tokens_per_step (the OLMo convention:
  step N has consumed N batches).
* `auto`: tokens when both runs' tokens per step are known and differ by more than
  `batch_rel_tol`; steps otherwise (the reason is recorded in the result).

Which values are kept (per metric; only metrics both runs logged)
* The run's values are never changed; the result only drops steps that have no fair partner.
* Held-out and downstream evals (`eval/...`) keep every checkpoint of both runs. A reference
  checkpoint that matches a run checkpoint (the same step on the step axis; the nearest one within
  `eval_match_rel_tol` of the run's tokens on the token axis, one to one) is placed on that run
  step, so both runs have a value there (the OLMo rerun evaluates every 100 steps, the run every
  200: both have 200, 400, ...). The reference's other checkpoints stay at their own place on the
  run's axis (rounded to a step), so that detectors can interpolate between them with an honest
  error (monitor/detectors/checkpoints.py); values are never changed here.
* Dense series (train, optimizer, perf, data): where the reference logged the run's step itself,
  that value is used; at the run's other steps (the two runs logged at different steps, as on the
  token axis) the reference is linearly interpolated, but only between two finite reference points
  at most `max_gap_factor` times the reference's usual logging interval apart (the median interval
  between its log points of that metric, in its own steps: a longer stretch is a gap in its log,
  not a sampling choice) and never across a restart of the reference (an attempt boundary: a
  `restart`/`resume` event, or the first step an attempt logged again). Nothing is extrapolated.
  Each run step's value depends on the reference alone, never on which other steps are aligned
  with it, so the watch service aligning a run piece by piece gets the values a whole-run
  alignment gets.
* Restarts inside one run are already resolved before alignment: `RunData.scalars` holds the
  latest attempt of every step.
* A value the reference logged as NaN/Inf is kept at an exact match (it is what the run logged)
  and never used as an interpolation end.

The watch service aligns every poll's few new rows against the same long reference, so what
depends on the reference alone (each metric's log points and usual interval, its attempt
boundaries, its token count) is prepared once: `PreparedReference`, which `align_pair` takes in
place of the reference. A poll then maps onto the run's axis only the reference points around its
rows, and costs the same at step 10k as at step 1.4M.

Both results have the same step index and columns; for dense series `run.series(k)` and
`reference.series(k)` have identical indexes; for evals the steps where both are finite are the
matched checkpoints (`eval_keys.matching_steps`). What was done is recorded in
`info.alignment` (schema.Alignment), with where the reference logged each metric both runs logged
(its steps, and those on the run's axis), even one that pairs at no step and so leaves the frames.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from monitor import schema
from monitor.errors import GapwatchError
from monitor.schema import Alignment, RunData
from monitor.store.run_frames import union_steps

AXES = ("auto", "step", "tokens")
EVAL_PREFIX = "eval/"
_RESTART_KINDS = (schema.EventKind.RESTART.value, schema.EventKind.RESUME.value)


@dataclass
class AlignConfig:
    """How strict alignment is; defaults suit pre-training logs."""

    # Two tokens-per-step values closer than this are the same batch size (float rounding in
    # exported configs), so `auto` stays on the step axis.
    batch_rel_tol: float = 1e-3
    # Token axis: a reference eval checkpoint matches a run checkpoint when their token counts
    # differ by at most this fraction. Late in pre-training loss falls ~0.1 nats per e-fold of
    # tokens (OLMo 2 ladder curves), so 0.5% more tokens moves it by ~5e-4 nats: far below the
    # run-to-run noise of the same config (0.015-0.042 nats between the OLMo ladder run and rerun).
    eval_match_rel_tol: float = 0.005
    # Interpolate the reference only between points at most this many usual logging intervals
    # apart: at 2x, one missing log line is bridged, a longer stretch counts as a gap.
    max_gap_factor: float = 2.0


@dataclass(frozen=True)
class ReferenceLog:
    """One reference metric where it was logged: its own steps (ascending), their values, and the
    usual interval between them (the median positive one; 0 with fewer than two steps). A metric
    logged at every step holds the reference's own arrays, not copies: a watched reference of
    1.4M steps and a hundred series would hold its size twice over."""

    steps: np.ndarray
    values: np.ndarray
    usual_gap: float


class PreparedReference:
    """A reference with what alignment needs of it alone, computed once for many alignments.

    Each metric's log is prepared on first use; the reference must not change meanwhile (the watch
    service prepares a reference again whenever it reads a grown one)."""

    def __init__(self, data: RunData) -> None:
        self.data = data
        self.name = data.name
        self.columns = list(data.scalars.columns)
        self.tokens_per_step = _tokens_per_step(data)
        self.bounds = _attempt_boundaries(data)
        self._to_tokens = None
        self._logs: dict[str, ReferenceLog] = {}

    def log(self, key: str) -> ReferenceLog:
        if key not in self._logs:
            theirs = self.data.series(key)
            steps = theirs.index.to_numpy()
            gaps = np.diff(steps)
            usual = float(np.median(gaps[gaps > 0])) if (gaps > 0).any() else 0.0
            self._logs[key] = ReferenceLog(steps, theirs.to_numpy(dtype="float64"), usual)
        return self._logs[key]

    def steps_to_tokens(self):
        if self._to_tokens is None:
            self._to_tokens = _steps_to_tokens(self.data)
        return self._to_tokens


def align_pair(run: RunData, reference: RunData | PreparedReference, axis: str = "auto",
               config: AlignConfig | None = None) -> tuple[RunData, RunData]:
    """Both runs on the run's steps, with only fairly comparable values (module docstring). The
    reference may come prepared, when it is aligned with many pieces of a run."""
    config = config or AlignConfig()
    if axis not in AXES:
        raise GapwatchError(f"alignment axis must be one of {', '.join(AXES)}, not {axis!r}")
    ref = reference if isinstance(reference, PreparedReference) else PreparedReference(reference)
    chosen, reason = _choose_axis(_tokens_per_step(run), ref.tokens_per_step, run.name, ref.name, axis, config)
    if chosen == "tokens":
        to_run_steps = _token_mapping(run, ref.steps_to_tokens())
    else:
        def to_run_steps(steps):
            return np.asarray(steps, dtype="float64")

    shared = [k for k in run.scalars.columns if k in ref.columns]
    run_cols: dict[str, pd.Series] = {}
    ref_cols: dict[str, pd.Series] = {}
    stats: dict[str, dict] = {}
    for key in shared:
        mine = run.series(key)
        theirs = ref.log(key)
        if mine.empty or theirs.steps.size == 0:
            continue
        logged = _reference_span(theirs.steps, to_run_steps)
        if key.startswith(EVAL_PREFIX):
            x = to_run_steps(theirs.steps)
            steps, values, how, used = _match_checkpoints(mine, x, theirs.values, chosen, config)
            run_cols[key] = mine
            ref_cols[key] = _with_unmatched(pd.Series(values, index=pd.Index(steps, dtype="int64")), mine,
                                            x[~used], theirs.values[~used])
        else:
            kept, values, how = _dense(mine, theirs, to_run_steps, ref.bounds, config)
            if len(kept) == 0:
                # The column leaves the aligned frames, but not the record: a detector can then
                # say that the runs logged it at no common step, not that the reference lacks it.
                stats[key] = {"points": 0, "method": "no common step", **logged}
                continue
            # Positions, not labels: a lookup of 1.4M labels hashes every one.
            run_cols[key] = mine if len(kept) == len(mine) else mine.iloc[kept]
            steps = run_cols[key].index
            # copy=False: at matching steps `values` is the reference's column itself, which
            # lets _unchanged see that without comparing 1.4M values.
            ref_cols[key] = pd.Series(values, index=steps, copy=False)
        stats[key] = {"points": int(len(steps)), "method": how, **logged}

    index = pd.Index(union_steps([s.index.to_numpy() for s in (*run_cols.values(), *ref_cols.values())]),
                     dtype="int64", name="step")
    meta = Alignment(axis=chosen, reason=reason, run=run.name, reference=ref.name, metrics=stats,
                     reference_only=tuple(k for k in ref.columns if k not in run.scalars.columns))
    run_out = _rebuild(run, run_cols, index, meta, identity=True, to_run_steps=None)
    ref_out = _rebuild(ref.data, ref_cols, index, meta, identity=False,
                       to_run_steps=to_run_steps)
    return run_out, ref_out


# --- choosing the axis ----------------------------------------------------------------------------
def _tokens_per_step(data: RunData) -> float | None:
    """The run's tokens per step: declared, else the mean rate of its `train/tokens` series; None
    when neither is known or the series does not grow (a counter stuck at one value gives no
    token axis)."""
    if data.info.tokens_per_step:
        return float(data.info.tokens_per_step)
    tok = data.series(schema.TRAIN_TOKENS)
    tok = tok[np.isfinite(tok.to_numpy())]
    steps = tok.index.to_numpy(dtype="float64")
    if len(tok) >= 2 and steps[-1] > steps[0]:
        rate = float((tok.iloc[-1] - tok.iloc[0]) / (steps[-1] - steps[0]))
        return rate if rate > 0 else None
    return None


def _choose_axis(a: float | None, b: float | None, run: str, reference: str, axis: str,
                 config: AlignConfig) -> tuple[str, str]:
    """The axis and why, from the run's and the reference's tokens per step (`a`, `b`)."""
    if axis == "step":
        return "step", "asked for"
    if axis == "tokens":
        if a is None or b is None:
            missing = run if a is None else reference
            raise GapwatchError(
                f"cannot align on tokens: run {missing!r} has neither tokens_per_step nor a growing "
                f"{schema.TRAIN_TOKENS} series"
            )
        return "tokens", "asked for"
    if a is None or b is None:
        return "step", "tokens per step unknown for at least one run, or its token count does not grow"
    if abs(a - b) <= config.batch_rel_tol * max(a, b):
        return "step", f"same tokens per step ({a:.0f})"
    return "tokens", f"tokens per step differ ({a:.0f} vs {b:.0f})"


def _steps_to_tokens(data: RunData):
    """A monotone function from this run's steps to its cumulative tokens."""
    tok = data.series(schema.TRAIN_TOKENS)
    tok = tok[np.isfinite(tok.to_numpy())]
    tps = data.info.tokens_per_step
    if len(tok) >= 2:
        xs = tok.index.to_numpy(dtype="float64")
        ys = np.maximum.accumulate(tok.to_numpy(dtype="float64"))
        lo_slope = tps or (ys[1] - ys[0]) / (xs[1] - xs[0])
        hi_slope = tps or (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])

        def f(steps):
            s = np.asarray(steps, dtype="float64")
            out = np.interp(s, xs, ys)
            out = np.where(s < xs[0], ys[0] + (s - xs[0]) * lo_slope, out)
            return np.where(s > xs[-1], ys[-1] + (s - xs[-1]) * hi_slope, out)

        return f
    if tps:
        return lambda steps: np.asarray(steps, dtype="float64") * float(tps)
    return None


def _token_mapping(run: RunData, ref_tokens):
    """reference steps -> the run's (fractional) step at the same number of tokens, given the
    reference's own steps -> tokens."""
    run_tokens = _steps_to_tokens(run)
    steps = run.scalars.index.to_numpy(dtype="float64")
    if len(steps) < 2:
        steps = np.array([0.0, 1.0])
    lo, hi = steps[0], steps[-1]
    grid = np.unique(np.concatenate([steps, [lo - 1.0, hi + 1.0]]))
    grid_tokens = run_tokens(grid)
    if np.any(np.diff(grid_tokens) <= 0):
        raise GapwatchError(f"run {run.name!r}: {schema.TRAIN_TOKENS} does not grow with steps")
    lo_slope = (grid_tokens[1] - grid_tokens[0]) / (grid[1] - grid[0])
    hi_slope = (grid_tokens[-1] - grid_tokens[-2]) / (grid[-1] - grid[-2])

    def to_run_steps(ref_steps):
        t = ref_tokens(np.asarray(ref_steps, dtype="float64"))
        out = np.interp(t, grid_tokens, grid)
        out = np.where(t < grid_tokens[0], grid[0] + (t - grid_tokens[0]) / lo_slope, out)
        return np.where(t > grid_tokens[-1], grid[-1] + (t - grid_tokens[-1]) / hi_slope, out)

    return to_run_steps


def _attempt_boundaries(data: RunData) -> np.ndarray:
    """Steps at which a later attempt of this run took over (restarts and resumes)."""
    bounds: set[int] = set()
    ev = data.events
    if len(ev):
        bounds |= set(ev.loc[ev["kind"].isin(_RESTART_KINDS), "step"].astype(int).tolist())
    rep = data.repeats
    if len(rep):
        later = rep[rep["attempt"] > rep["attempt"].min()]
        bounds |= set(later.groupby("attempt")["step"].min().astype(int).tolist())
    return np.array(sorted(bounds), dtype="float64")


# --- per-metric pairing -----------------------------------------------------------------------------
def _reference_span(steps: np.ndarray, to_run_steps) -> dict:
    """Where the reference logged a metric, for the alignment's record: its first and last step,
    those steps on the run's axis and how many it logged. The aligned frames keep only what pairs
    with the run, so this is what says that a reference stopped at step 900 (monitor/detectors/overlap.py)."""
    ends = to_run_steps(steps[[0, -1]])
    return {"reference_steps": [int(steps[0]), int(steps[-1])],
            "reference_at": [int(np.rint(ends[0])), int(np.rint(ends[1]))],
            "reference_points": int(len(steps))}


def _match_checkpoints(mine: pd.Series, x: np.ndarray, values: np.ndarray, axis: str,
                       config: AlignConfig):
    """Run checkpoints paired one to one with the reference checkpoint at the same position; the
    last value marks the reference checkpoints (in the order of `x`) that found a partner."""
    run_steps = mine.index.to_numpy(dtype="float64")
    if axis == "step":
        common = np.intersect1d(run_steps, x)
        pos = np.searchsorted(x, common)
        return common.astype("int64"), values[pos], "matching steps", np.isin(x, common)
    # Nearest reference checkpoint for each run checkpoint, accepted within tolerance and taken
    # by the closest run checkpoint only.
    order = np.argsort(x)
    xs, vs = x[order], values[order]
    idx = np.clip(np.searchsorted(xs, run_steps), 1, len(xs) - 1) if len(xs) > 1 else \
        np.zeros(len(run_steps), dtype=int)
    if len(xs) > 1:
        left_closer = np.abs(xs[idx - 1] - run_steps) <= np.abs(xs[idx] - run_steps)
        idx = np.where(left_closer, idx - 1, idx)
    dist = np.abs(xs[idx] - run_steps)
    ok = dist <= np.maximum(config.eval_match_rel_tol * np.abs(run_steps), 1e-9)
    best: dict[int, tuple[float, int]] = {}  # reference index -> (distance, run index)
    for i in np.flatnonzero(ok):
        j = int(idx[i])
        if j not in best or dist[i] < best[j][0]:
            best[j] = (float(dist[i]), int(i))
    pairs = sorted((i, j) for j, (_, i) in best.items())
    run_idx = np.array([i for i, _ in pairs], dtype=int)
    ref_idx = np.array([j for _, j in pairs], dtype=int)
    used = np.zeros(len(x), dtype=bool)
    used[order[ref_idx]] = True
    return (run_steps[run_idx].astype("int64"), vs[ref_idx],
            f"checkpoints within {config.eval_match_rel_tol:.1%} of the tokens", used)


def _with_unmatched(matched: pd.Series, mine: pd.Series, x: np.ndarray, values: np.ndarray) -> pd.Series:
    """The matched reference checkpoints plus the reference's other checkpoints at their own place
    on the run's axis (rounded to a step), from the last one before the run's first checkpoint to
    the first one after its last: the brackets (and third points) an interpolation may need."""
    x = np.asarray(x, dtype="float64")
    values = np.asarray(values, dtype="float64")
    if mine.empty or x.size == 0:
        return matched
    lo, hi = float(mine.index[0]), float(mine.index[-1])
    order = np.argsort(x, kind="stable")
    x, values = x[order], values[order]
    first = max(int(np.searchsorted(x, lo, side="left")) - 1, 0)
    last = min(int(np.searchsorted(x, hi, side="right")), x.size - 1)
    near = np.rint(x[first:last + 1]).astype("int64")
    # A checkpoint already matched, or one rounding onto a run checkpoint it did not match (token
    # axis), is not repeated.
    taken = matched.index.union(mine.index)
    free = ~pd.Index(near).isin(taken) & ~pd.Index(near).duplicated()
    extra = pd.Series(values[first:last + 1][free], index=pd.Index(near[free], dtype="int64"))
    return pd.concat([matched, extra]).sort_index()


def _dense(mine: pd.Series, log: ReferenceLog, to_run_steps, bounds: np.ndarray, config: AlignConfig):
    """Reference values at the run's steps: exact where logged, else honest interpolation. Returns
    the positions in `mine` of the steps that have a reference value, those values and how."""
    run_steps = mine.index.to_numpy(dtype="float64")
    n = log.steps.size
    # Only the reference points that can pair with the run's steps are placed on its axis: from
    # the last one before its first step to the first one at or after its last (the mapping keeps
    # the order of steps, so a bisection finds them).
    lo = max(_first_at_or_after(log.steps, to_run_steps, run_steps[0]) - 1, 0)
    hi = min(_first_at_or_after(log.steps, to_run_steps, run_steps[-1]) + 1, n)
    xs, vs, rs = to_run_steps(log.steps[lo:hi]), log.values[lo:hi], log.steps[lo:hi]
    if lo == 0 and hi == n and len(xs) == len(run_steps) and np.array_equal(xs, run_steps):
        return np.arange(n), log.values, "matching steps"  # the same steps: nothing to search
    first, last = to_run_steps(log.steps[[0, -1]])
    inside = (run_steps >= first) & (run_steps <= last)
    targets = run_steps[inside]
    if targets.size == 0:
        return np.flatnonzero(inside), np.empty(0), "matching steps"
    pos = np.searchsorted(xs, targets)
    pos_c = np.clip(pos, 0, len(xs) - 1)
    exact = np.isclose(xs[pos_c], targets, rtol=0.0, atol=1e-6)
    where = np.flatnonzero(inside)
    if exact.all() or n < 2:
        return where[exact], vs[pos_c[exact]], "matching steps"
    left = np.clip(pos - 1, 0, len(xs) - 2)
    right = left + 1
    x0, x1 = xs[left], xs[right]
    y0, y1 = vs[left], vs[right]
    # The gap and the restarts are the reference's own: judged in its steps.
    r0, r1 = rs[left], rs[right]
    span_ok = (r1 - r0) <= config.max_gap_factor * log.usual_gap + 1e-9
    finite = np.isfinite(y0) & np.isfinite(y1)
    # A boundary b splits the segment if r0 < b <= r1.
    crosses = np.searchsorted(bounds, r1, side="right") > np.searchsorted(bounds, r0, side="right")
    interp_ok = ~exact & span_ok & finite & ~crosses & (x1 > x0)
    frac = np.where(x1 > x0, (targets - x0) / np.where(x1 > x0, x1 - x0, 1.0), 0.0)
    interp = y0 + frac * (y1 - y0)
    keep = exact | interp_ok
    out = np.where(exact, vs[pos_c], interp)
    return where[keep], out[keep], "interpolated between reference points"


def _first_at_or_after(steps: np.ndarray, to_run_steps, target: float) -> int:
    """The index of the first of the (ascending) reference steps whose place on the run's axis is
    at or after `target`, mapping a few dozen steps rather than all of them."""
    return bisect.bisect_left(range(steps.size), target, key=lambda i: float(to_run_steps(steps[i:i + 1])[0]))


# --- rebuilding RunData ------------------------------------------------------------------------------
def _positions(index: pd.Index, s: pd.Series) -> np.ndarray | slice:
    """Where a column's steps (all among the index's) sit in the index."""
    if len(s) == len(index):
        return slice(None)  # sorted, distinct and as many: the same steps
    return np.searchsorted(index.to_numpy(), s.index.to_numpy())


def _frame(cols: dict[str, pd.Series], index: pd.Index) -> pd.DataFrame:
    """One float block filled column by column: a frame of reindexed Series costs a hash lookup a
    step and a copy to consolidate. Rarely logged columns (evals) are kept sparse, as a loaded
    run's are (schema.keep_sparse)."""
    if not cols:
        return pd.DataFrame(index=index)
    sparse_keys = {k for k, s in cols.items() if schema.keep_sparse(len(s), len(index))}
    dense = [k for k in cols if k not in sparse_keys]
    matrix = np.full((len(index), len(dense)), np.nan)
    for j, key in enumerate(dense):
        matrix[_positions(index, cols[key]), j] = cols[key].to_numpy(dtype="float64")
    # copy=False: pandas 3 copies a NumPy array it is given, by default.
    frame = pd.DataFrame(matrix, index=index, columns=pd.Index(dense, dtype=str), copy=False)
    if not sparse_keys:
        return frame
    sparse = {}
    for key in sparse_keys:
        column = np.full(len(index), np.nan)
        column[_positions(index, cols[key])] = cols[key].to_numpy(dtype="float64")
        sparse[key] = pd.arrays.SparseArray(column, fill_value=np.nan)
    frame = schema.with_sparse_columns(frame, sparse)
    # Sorted keys (a loaded run's) are already in place; selecting columns would copy the block.
    return frame if list(frame.columns) == list(cols) else frame[list(cols)]


def _unchanged(scalars: pd.DataFrame, cols: dict[str, pd.Series], index: pd.Index) -> bool:
    """Whether the aligned frame would equal `scalars` restricted to the keys of `cols` exactly:
    same steps, those columns in the frame's order, and in each column the kept values are all
    the column's values (NaN elsewhere in both)."""
    if [k for k in scalars.columns if k in cols] != list(cols) or not index.equals(scalars.index):
        return False
    for key, s in cols.items():
        column = scalars[key]
        values = s.to_numpy(dtype="float64")
        where = _positions(index, s)
        if isinstance(column.dtype, pd.SparseDtype):
            # Both are NaN but at their non-NaN cells, so those decide, and a sparse column's are
            # its stored values: no pass over every step per eval series.
            at, kept = schema.non_nan_cells(column)
            logged = ~np.isnan(values)
            mine = (np.arange(len(index)) if isinstance(where, slice) else where)[logged]
            if not (np.array_equal(at, mine) and np.array_equal(kept, values[logged])):
                return False
            continue
        original = column.to_numpy()
        if isinstance(where, slice) and _same_memory(original, values):
            continue  # the column itself, as a run's dense series are
        if not np.array_equal(original[where], values, equal_nan=True):
            return False
        if isinstance(where, np.ndarray) and (np.count_nonzero(~np.isnan(original))
                                              != np.count_nonzero(~np.isnan(values))):
            return False
    return True


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are views of the very same values (so equal without a comparison)."""
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _rebuild(data: RunData, cols: dict[str, pd.Series], index: pd.Index, meta: Alignment,
             identity: bool, to_run_steps) -> RunData:
    if _unchanged(data.scalars, cols, index):
        # The common case (same steps; the same metrics, or the run's minus those only it logged,
        # such as the spike scores `detect` stores): the frame's own columns, not a copy of them;
        # pandas' copy-on-write keeps the two apart should either be written. `drop` keeps views
        # of the columns it leaves, where selecting them would copy the block.
        frame = data.scalars.drop(columns=[k for k in data.scalars.columns if k not in cols])
    else:
        frame = _frame(cols, index)
    info = replace(data.info, alignment=meta)
    nonfinite = []
    for key, s in cols.items():
        bad = s[~np.isfinite(s.to_numpy(dtype="float64"))]
        nonfinite += [(key, int(st), float(v)) for st, v in bad.items()]
    logged_nonfinite = pd.DataFrame(
        {"key": pd.Series([k for k, _, _ in nonfinite], dtype=str),
         "step": pd.Series([s for _, s, _ in nonfinite], dtype="int64"),
         "value": pd.Series([v for _, _, v in nonfinite], dtype=float)}
    )
    events = data.events.copy()
    repeats = data.repeats.copy()
    if not identity and to_run_steps is not None:
        if len(events):
            events["step"] = np.rint(to_run_steps(events["step"].to_numpy())).astype("int64")
        if len(repeats):
            repeats["step"] = np.rint(to_run_steps(repeats["step"].to_numpy())).astype("int64")
    return RunData(info=info, scalars=frame, events=events, repeats=repeats,
                   logged_nonfinite=logged_nonfinite)
