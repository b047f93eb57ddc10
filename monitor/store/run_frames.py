"""Logged rows become a `RunData` here, and only here: the full load of a run and the watch
service's batches of new rows share this builder (`stream_run_data`), so the two can never
disagree on what a step's value, a repeat or a logged NaN is."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.schema import RunData, RunInfo, keep_sparse, with_sparse_columns


@dataclass
class KeyRows:
    """Rows of one metric key as parallel arrays, ordered by (step, attempt), one per pair."""

    steps: np.ndarray
    attempts: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def latest(self) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values of the highest attempt of each step (the last of each run of equals)."""
        if not len(self.steps):
            return self.steps, self.values
        last = np.empty(len(self.steps), dtype=bool)
        last[:-1] = self.steps[1:] != self.steps[:-1]
        last[-1] = True
        if last.all():  # no step logged twice (the common case): no copies
            return self.steps, self.values
        return self.steps[last], self.values[last]

    def repeated(self) -> np.ndarray:
        """Mask of the rows whose step was logged by more than one attempt."""
        mask = np.zeros(len(self.steps), dtype=bool)
        if len(self.steps) > 1:
            same = self.steps[1:] == self.steps[:-1]
            mask[1:] |= same
            mask[:-1] |= same
        return mask


def empty_rows() -> KeyRows:
    return KeyRows(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, float))


def run_data(info: RunInfo, rows: Mapping[str, KeyRows], events: pd.DataFrame,
             earlier: dict[str, KeyRows] | None = None) -> RunData:
    """The RunData of these rows (the watch service's batches). `earlier` holds rows of other
    attempts at some of the same (key, step)s that are not among `rows` (the watch service reads
    them apart): they count for repeats only, since the rows given are the latest."""
    steps = union_steps([r.latest()[0] for r in rows.values() if len(r)])
    return stream_run_data(info, steps, sorted(rows), lambda key: (rows[key],), events, earlier)


def stream_run_data(info: RunInfo, steps: np.ndarray, keys: list[str], read: Callable[[str], Iterable[KeyRows]],
                    events: pd.DataFrame, earlier: dict[str, KeyRows] | None = None,
                    counts: Mapping[str, int] | None = None) -> RunData:
    """The RunData of the rows `read(key)` yields for each of `keys`: parts in step order, every
    row of a step in one part (the store's sealed chunks, then its write tail). `steps` holds
    every step they logged, sorted and distinct (the full load reads them first, at two bytes a
    step), so each part's latest values go straight into the frame as it is read and a whole
    run is never held as rows (three arrays a row) besides the frame. `earlier` (see run_data)
    needs one part per key. `counts` (rows logged per key, when known before reading) lets the
    keys logged at few steps be kept sparse (monitor.schema.keep_sparse)."""
    earlier = dict(earlier or {})
    index = steps.astype(np.int64, copy=False)
    keys = sorted(keys)
    sparse_keys = {k for k in keys if keep_sparse(counts.get(k, 0), len(index))} if counts is not None else set()
    dense_keys = [k for k in keys if k not in sparse_keys]
    # One float block filled a key at a time: a pivot of the long rows would cost several times
    # the frame's size in temporaries. The block is (key, step), so that each column is one
    # contiguous array: detectors and the report read a column at a time.
    matrix = np.empty((len(dense_keys), len(index)))
    names: list[str] = []
    sparse: dict[str, pd.arrays.SparseArray] = {}
    repeat_parts = []
    nonfinite_parts = []
    for key in keys:
        # A sparse key's points are gathered as (positions, values), never as a row of every step.
        at_parts: list[np.ndarray] | None = [] if key in sparse_keys else None
        value_parts: list[np.ndarray] = []
        if at_parts is None:
            row = matrix[len(names)]
            row[:] = np.nan
        logged = 0
        for part in read(key):
            if not len(part):
                _collect_repeats(repeat_parts, key, part, earlier.pop(key, None))
                continue
            if key in earlier or (part.steps[1:] == part.steps[:-1]).any():
                _collect_repeats(repeat_parts, key, part, earlier.pop(key, None))
                part_steps, values = part.latest()
            else:  # no step logged twice (a sealed chunk of one attempt): nothing to sort out
                part_steps, values = part.steps, part.values
            at = int(np.searchsorted(index, part_steps[0]))
            end = at + len(part_steps)
            if at_parts is not None:
                at_parts.append(np.searchsorted(index, part_steps))
                value_parts.append(values)
            elif index[end - 1] == part_steps[-1]:  # sorted and distinct: the same run of steps
                row[at:end] = values
            else:
                row[np.searchsorted(index, part_steps)] = values
            logged += len(part_steps)
            if not np.isfinite(values).all():
                bad = ~np.isfinite(values)
                nonfinite_parts.append((key, part_steps[bad], None, values[bad]))
        if not logged:
            continue
        if at_parts is not None:
            sparse[key] = _sparse_column(at_parts, value_parts, len(index))
        else:
            names.append(key)
    for key in sorted(earlier):  # keys with earlier attempts' rows but none of their own
        _collect_repeats(repeat_parts, key, empty_rows(), earlier[key])
    step_index = pd.Index(index, dtype="int64", name="step")
    # copy=False: pandas 3 copies a NumPy array it is given, by default. A key that logged
    # nothing handed its row on to the next key; rows after the last one used are left out.
    scalars = pd.DataFrame(matrix[:len(names)].T, index=step_index, columns=pd.Index(names, dtype=str), copy=False)
    if sparse:
        scalars = with_sparse_columns(scalars, sparse)
    elif not names:
        scalars = pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    repeat_parts.sort(key=lambda p: p[0])
    nonfinite_parts.sort(key=lambda p: p[0])
    return RunData(info=info, scalars=scalars, events=events.reset_index(drop=True),
                   repeats=_long(repeat_parts, with_attempt=True),
                   logged_nonfinite=_long(nonfinite_parts, with_attempt=False))


def _sparse_column(at_parts: list[np.ndarray], value_parts: list[np.ndarray], length: int) -> pd.arrays.SparseArray:
    """The column of these points (positions in step order) as a NaN-filled SparseArray: a logged
    NaN is the fill, so it is not among the stored values, as in a sparse copy of the dense row."""
    at = np.concatenate(at_parts)
    values = np.concatenate(value_parts).astype(float, copy=False)
    kept = ~np.isnan(values)
    if not kept.all():
        at, values = at[kept], values[kept]
    return pd.arrays.SparseArray.from_indices(values, at, length, fill_value=np.nan)


def _collect_repeats(parts: list, key: str, rows: KeyRows, earlier: KeyRows | None) -> None:
    every = _with_earlier(rows, earlier)
    mask = every.repeated()
    if mask.any():
        parts.append((key, every.steps[mask], every.attempts[mask], every.values[mask]))


def union_steps(arrays: list[np.ndarray]) -> np.ndarray:
    """Sorted distinct steps of several sorted arrays, in their own dtype. Dense metrics share one
    array of steps, so identical arrays are merged once."""
    distinct: list[np.ndarray] = []
    for steps in arrays:
        if not any(len(d) == len(steps) and np.array_equal(d, steps) for d in distinct):
            distinct.append(steps)
    if not distinct:
        return np.empty(0, np.int64)
    if len(distinct) == 1:
        return distinct[0]
    # A stable sort merges the already sorted runs (timsort) instead of sorting from scratch.
    merged = np.sort(np.concatenate(distinct), kind="stable")
    return merged[np.r_[True, merged[1:] != merged[:-1]]]


def _with_earlier(rows: KeyRows, earlier: KeyRows | None) -> KeyRows:
    if earlier is None or not len(earlier):
        return rows
    steps = np.concatenate([earlier.steps, rows.steps])
    attempts = np.concatenate([earlier.attempts, rows.attempts])
    values = np.concatenate([earlier.values, rows.values])
    order = np.lexsort((attempts, steps))
    steps, attempts, values = steps[order], attempts[order], values[order]
    first = np.r_[True, (steps[1:] != steps[:-1]) | (attempts[1:] != attempts[:-1])]
    return KeyRows(steps[first], attempts[first], values[first])


def _long(parts: list[tuple], with_attempt: bool) -> pd.DataFrame:
    columns = {"key": pd.Series(dtype=str), "step": pd.Series(dtype="int64")}
    if with_attempt:
        columns["attempt"] = pd.Series(dtype="int64")
    columns["value"] = pd.Series(dtype=float)
    if not parts:
        return pd.DataFrame(columns)
    out = {
        "key": np.concatenate([np.full(len(p[1]), p[0], dtype=object) for p in parts]),
        "step": np.concatenate([p[1] for p in parts]).astype(np.int64),
    }
    if with_attempt:
        out["attempt"] = np.concatenate([p[2] for p in parts]).astype(np.int64)
    out["value"] = np.concatenate([p[3] for p in parts]).astype(float)
    frame = pd.DataFrame(out)
    frame["key"] = frame["key"].astype(str)
    return frame
