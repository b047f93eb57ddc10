"""The logging client's metric rows as columns: what the writer holds between log() and the store.

A backlog held as NumPy columns (keys as codes into a short list of names) is a handful of
objects for the garbage collector, where the queued calls are two per call and a list of keys
one reference per row: a writer behind a fast trainer keeps
its backlog here, so a collection on the training thread never walks millions of them. Columns
also split into batches of any size without copying row by row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain

import numpy as np

from monitor.schema import MetricRows

_PLAIN_NUMBERS = frozenset({float, int, np.float64, np.float32, np.int64, np.int32})


@dataclass
class MetricColumns:
    steps: np.ndarray
    codes: np.ndarray
    """Each row's key, as an index into `names`."""
    names: list[str]
    values: np.ndarray
    walls: np.ndarray

    @classmethod
    def empty(cls) -> "MetricColumns":
        return cls(np.empty(0, np.int64), np.empty(0, np.int32), [], np.empty(0, float), np.empty(0, float))

    @classmethod
    def _of(cls, steps, keys: list[str], values, walls) -> "MetricColumns":
        # Codes by a dict, in C loops that keep the interpreter lock: pandas' factorize lets go of
        # it, and a writer that let go waits a switch interval to get it back from a busy trainer.
        names = list(dict.fromkeys(keys))
        code = {name: i for i, name in enumerate(names)}
        codes = np.fromiter(map(code.__getitem__, keys), dtype=np.int32, count=len(keys))
        return cls(steps, codes, names, values, walls)

    @classmethod
    def from_queue(cls, queued: list, to_float) -> "MetricColumns":
        """Rows of queued log() calls, each three items (step, {key: value}, wall time); `to_float`
        turns a value that is not a plain number into one (a device array is fetched there). The
        per-call work is done by C loops (map, chain), not by the interpreter a call at a time."""
        bodies = queued[1::3]
        counts = list(map(len, bodies))
        keys = list(chain.from_iterable(bodies))
        values = list(chain.from_iterable(map(dict.values, bodies)))
        if set(map(type, values)) <= _PLAIN_NUMBERS:
            floats = np.array(values, dtype=float)
        else:
            floats = np.fromiter((to_float(v) for v in values), dtype=float, count=len(values))
        return cls._of(np.repeat(np.array(queued[0::3], dtype=np.int64), counts), keys, floats,
                       np.repeat(np.array(queued[2::3], dtype=float), counts))

    @classmethod
    def from_rows(cls, rows: list[list]) -> "MetricColumns":
        """Rows [step, key, value, wall_time] as the spool keeps them."""
        if not rows:
            return cls.empty()
        steps, keys, values, walls = zip(*rows)
        return cls._of(np.array(steps, dtype=np.int64), list(keys),
                       np.array([math.nan if v is None else v for v in values], dtype=float),
                       np.array(walls, dtype=float))

    def keys(self) -> np.ndarray:
        return np.array(self.names, dtype=object)[self.codes]

    def rows(self) -> list[list]:
        """As the spool writes them (JSON lines)."""
        return [list(r) for r in zip(self.steps.tolist(), self.keys().tolist(), self.values.tolist(),
                                     self.walls.tolist())]

    def __len__(self) -> int:
        return len(self.steps)

    def split(self, n: int) -> tuple["MetricColumns", "MetricColumns"]:
        """The first n rows and the rest."""
        return (MetricColumns(self.steps[:n], self.codes[:n], self.names, self.values[:n], self.walls[:n]),
                MetricColumns(self.steps[n:], self.codes[n:], self.names, self.values[n:], self.walls[n:]))

    @staticmethod
    def concat(parts: list["MetricColumns"]) -> "MetricColumns":
        parts = [p for p in parts if len(p)]
        if not parts:
            return MetricColumns.empty()
        if len(parts) == 1:
            return parts[0]
        names: dict[str, int] = {}
        codes = []
        for p in parts:
            remap = np.array([names.setdefault(n, len(names)) for n in p.names], dtype=np.int32)
            codes.append(remap[p.codes])
        return MetricColumns(np.concatenate([p.steps for p in parts]), np.concatenate(codes), list(names),
                             np.concatenate([p.values for p in parts]), np.concatenate([p.walls for p in parts]))

    def for_store(self, attempt: int) -> MetricRows:
        """These rows as `Store.write_metrics` takes them, the same arrays with no frame between:
        a string per row, or a frame's parsing, would hold the interpreter lock (and the training
        thread with it) for as long as the write's own work."""
        return MetricRows(self.steps, self.codes, self.names, self.values, self.walls,
                          np.full(len(self.steps), attempt, dtype=np.int64))
