"""Logged rows become a `RunData` here, and only here: the full load of a run and the watch
service's batches of new rows share this builder, so the two can never disagree on what a step's
value, a repeat or a logged NaN is."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.schema import RunData, RunInfo


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


def split_long(frame: pd.DataFrame) -> dict[str, KeyRows]:
    """A long frame (key, step, attempt, value) as rows per key, each ordered by (step, attempt)."""
    out: dict[str, KeyRows] = {}
    if frame.empty:
        return out
    ordered = frame.sort_values(["key", "step", "attempt"], kind="stable")
    keys = ordered["key"].to_numpy()
    steps = ordered["step"].to_numpy(np.int64)
    attempts = ordered["attempt"].to_numpy(np.int64)
    values = ordered["value"].to_numpy(float)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        out[str(keys[lo])] = KeyRows(steps[lo:hi], attempts[lo:hi], values[lo:hi])
    return out


def run_data(info: RunInfo, rows: Mapping[str, KeyRows] | Iterable[tuple[str, KeyRows]], events: pd.DataFrame,
             earlier: dict[str, KeyRows] | None = None) -> RunData:
    """The RunData of these rows. `earlier` holds rows of other attempts at some of the same
    (key, step)s that are not among `rows` (the watch service reads them apart): they count for
    repeats only, since the rows given are the latest.

    `rows` may be an iterator of (key, rows) pairs: each key's rows are then dropped as soon as
    its latest values are taken, so a whole run is never held as rows (three arrays a row) and as
    the frame at once."""
    earlier = earlier or {}
    pairs = sorted(rows.items()) if isinstance(rows, Mapping) else rows
    keys: list[str] = []
    steps_of: list[np.ndarray] = []
    values_of: list[np.ndarray] = []
    distinct: list[np.ndarray] = []
    repeat_parts = []
    nonfinite_parts = []
    seen = set()
    for key, key_rows in pairs:
        seen.add(key)
        _collect_repeats(repeat_parts, key, key_rows, earlier.get(key))
        if not len(key_rows):
            continue
        steps, values = key_rows.latest()
        # Dense metrics share one array of steps: keep one, so the index is merged from few.
        same = next((d for d in distinct if len(d) == len(steps) and np.array_equal(d, steps)), None)
        if same is None:
            distinct.append(steps)
        keys.append(key)
        steps_of.append(steps if same is None else same)
        values_of.append(values)
        bad = ~np.isfinite(values)
        if bad.any():
            nonfinite_parts.append((key, steps[bad], None, values[bad]))
    for key in sorted(set(earlier) - seen):
        _collect_repeats(repeat_parts, key, empty_rows(), earlier[key])
    del pairs

    order = sorted(range(len(keys)), key=keys.__getitem__)
    index = _union(distinct)
    # One float block filled column by column: a pivot of the long rows would cost several times
    # the frame's size in temporaries. The block is (key, step), so that each column is one
    # contiguous array: detectors and the report read a column at a time.
    matrix = np.empty((len(keys), len(index)))
    for j, i in enumerate(order):
        if len(steps_of[i]) == len(index):  # logged at every step: the index itself
            matrix[j] = values_of[i]
        else:
            matrix[j] = np.nan
            matrix[j, np.searchsorted(index, steps_of[i])] = values_of[i]
        values_of[i] = None  # placed: let it go
    names = [keys[i] for i in order]
    # copy=False: pandas 3 copies a NumPy array it is given, by default.
    scalars = pd.DataFrame(matrix.T, index=pd.Index(index, dtype="int64", name="step"),
                           columns=pd.Index(names, dtype=str) if names else None, copy=False)
    if not names:
        scalars = pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    repeat_parts.sort(key=lambda p: p[0])
    nonfinite_parts.sort(key=lambda p: p[0])
    return RunData(info=info, scalars=scalars, events=events.reset_index(drop=True),
                   repeats=_long(repeat_parts, with_attempt=True),
                   logged_nonfinite=_long(nonfinite_parts, with_attempt=False))


def _collect_repeats(parts: list, key: str, rows: KeyRows, earlier: KeyRows | None) -> None:
    every = _with_earlier(rows, earlier)
    mask = every.repeated()
    if mask.any():
        parts.append((key, every.steps[mask], every.attempts[mask], every.values[mask]))


def _union(arrays: list[np.ndarray]) -> np.ndarray:
    """Sorted distinct steps of several sorted arrays. Dense metrics share one array of steps, so
    identical arrays are merged once."""
    distinct: list[np.ndarray] = []
    for steps in arrays:
        if not any(len(d) == len(steps) and np.array_equal(d, steps) for d in distinct):
            distinct.append(steps)
    if not distinct:
        return np.empty(0, np.int64)
    if len(distinct) == 1:
        return distinct[0].astype(np.int64, copy=False)
    # A stable sort merges the already sorted runs (timsort) instead of sorting from scratch.
    merged = np.sort(np.concatenate(distinct), kind="stable")
    keep = np.empty(len(merged), dtype=bool)
    keep[0] = True
    keep[1:] = merged[1:] != merged[:-1]
    return merged[keep].astype(np.int64, copy=False)


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
