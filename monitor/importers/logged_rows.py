"""The metric rows of a log that a running trainer appends to, in file order, with its restarts.

Text logs, JSON Lines and CSV files share one rule, the one TensorBoard files follow per tag: a line
that logs a series at a lower step than that series last had is a restart (the trainer resumed
from a checkpoint and logs those steps again). A new attempt starts there, its values win over the
earlier ones for the same steps, and a `restart` event records the line where it happened. A lower
step alone is not a restart: a series with a counter of its own (Lightning's CSVLogger numbers a
validation loss logged per batch by validation batch) or an evaluation that arrives after later
training steps logs below the previous line without going back on itself. A reader whose trainer
says in its log that a new process starts training (torchtitan's `Training starts at step N`)
starts an attempt there too (`started_again`): a job resumed from the checkpoint of its last logged
step goes back on no step.
"""

from __future__ import annotations

import math
from array import array
from itertools import repeat
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from monitor.schema import EventKind

from .imported_run import scalars_frame
from .name_codes import NameCodes


@dataclass(frozen=True)
class Restart:
    """Line or row `line` starts a new attempt: `key` went back there from step `previous` to
    `step`."""

    line: int
    key: str
    previous: int
    step: int

    def reason(self) -> str:
        return f"{self.key} went back from step {self.previous} to {self.step}"


@dataclass
class SeriesAttempts:
    """The attempt in force and the step each series last logged in it (the module's rule)."""

    attempt: int = 1
    last_of: dict[str, int] = field(default_factory=dict)

    def lines(self, n_lines: int, lines: np.ndarray, codes: np.ndarray, names: list[str],
              steps: np.ndarray) -> tuple[np.ndarray, list[Restart]]:
        """The attempt of each of `n_lines` consecutive lines or rows, and the restarts among
        them, from their values in file order: series names[codes[i]] logged at steps[i] on line
        lines[i]. A restart takes in its whole line."""
        steps = np.asarray(steps, dtype=np.int64)
        last = np.array([self.last_of.get(n, -1) for n in names], dtype=np.int64)
        attempts = np.full(n_lines, self.attempt, dtype=np.int64)
        restarts = []
        for item, went_back, previous in _going_back(lines, codes, steps, last):
            self.attempt += 1
            attempts[lines[item]:] = self.attempt
            restarts.append(Restart(int(lines[item]), names[int(codes[went_back])], previous,
                                    int(steps[went_back])))
        if restarts:
            self.last_of = {}
        self.last_of.update({n: int(x) for n, x in zip(names, last.tolist()) if x >= 0})
        return attempts, restarts


class LoggedRows:
    """Rows added a line at a time (`at_step`, then `add` for each value of the line or `add_line`
    for all of them), kept in typed arrays with each series' name as a code: a million-line log
    holds 8 bytes a number and 4 a name, not a Python object each, and becomes a frame whose keys
    are categorical."""

    def __init__(self) -> None:
        self.names = NameCodes()
        self._empty()
        self.events: list[dict] = []
        self.series = SeriesAttempts()
        self.line = 0
        self._line_start = 0

    @property
    def attempt(self) -> int:
        return self.series.attempt

    def __len__(self) -> int:
        return len(self.steps)

    def at_step(self, line: int, step: int) -> int:
        """Note that `line`, which logs `step`, is being read: a restart takes in the whole line
        and names it."""
        self.line = line
        self._line_start = len(self.steps)
        return step

    def started_again(self, line: int, step: int, said: str) -> None:
        """The trainer said at `line` (`said`) that a new process trains on from `step`: a new
        attempt starts there, whether or not a step goes back (a job resumed from the checkpoint
        of its last logged step goes back on nothing). Said before anything was logged in the
        attempt in force, it is the first start, or the same one again."""
        series = self.series
        if not series.last_of:
            return
        previous = max(series.last_of.values())
        series.attempt += 1
        series.last_of = {}
        self.events.append({
            "step": step, "kind": EventKind.RESTART.value, "attempt": series.attempt,
            "payload": {"reason": said, "line": line, "previous_step": previous},
        })

    def _event(self, line: int, restart: Restart, attempt: int) -> None:
        self.events.append({
            "step": restart.step, "kind": EventKind.RESTART.value, "attempt": attempt,
            "payload": {"reason": restart.reason(), "line": line, "previous_step": restart.previous},
        })

    def at_steps(self, first_line: int, steps: np.ndarray, names: list[str], logged: np.ndarray) -> np.ndarray:
        """The attempts of consecutive lines from `first_line` on, read as columns: `logged` has a
        row per name, True where that line logs it."""
        steps = np.asarray(steps, dtype=np.int64)
        line, col = np.nonzero(logged.T)  # line by line, in file order
        attempts, restarts = self.series.lines(len(steps), line, col, names, steps[line])
        for restart in restarts:
            self._event(first_line + restart.line, restart, int(attempts[restart.line]))
        return attempts

    def add(self, step: int, key: str, value: float, wall: float = math.nan) -> None:
        series = self.series
        if step < series.last_of.get(key, step):
            restart = Restart(self.line, key, series.last_of[key], step)
            series.attempt += 1
            series.last_of = {}
            for i in range(self._line_start, len(self.steps)):  # the line's earlier values
                self.attempts[i] = series.attempt
                series.last_of[self.names.all[self.codes[i]]] = self.steps[i]
            self._event(self.line, restart, series.attempt)
        series.last_of[key] = step
        self.steps.append(step)
        self.codes.append(self.names.code(key))
        self.values.append(value)
        self.attempts.append(series.attempt)
        self.walls.append(wall)

    def add_line(self, step: int, keys: list[str], values: list[float]) -> None:
        """`add` for the values a line logs at one step, appended together where none goes back."""
        last_of, n = self.series.last_of, len(keys)
        if n and max(map(last_of.get, keys, repeat(step, n))) > step:  # a series goes back: a restart
            for key, value in zip(keys, values):
                self.add(step, key, value)
            return
        last_of.update(dict.fromkeys(keys, step))
        self.steps.extend(repeat(step, n))
        self.codes.extend(map(self.names.code, keys))
        self.values.extend(values)
        self.attempts.extend(repeat(self.series.attempt, n))
        self.walls.extend(repeat(math.nan, n))

    def scalars(self, with_wall_time: bool = False) -> pd.DataFrame:
        keys = pd.Categorical.from_codes(np.asarray(self.codes, dtype=np.int32), categories=self.names.all)
        return scalars_frame(self.steps, keys, self.values, self.attempts,
                             wall_time=self.walls if with_wall_time else None)

    def take(self, with_wall_time: bool = True) -> pd.DataFrame:
        """The rows added since the last take, leaving the attempt as it is."""
        frame = self.scalars(with_wall_time=with_wall_time)
        self._empty()
        return frame

    def _empty(self) -> None:
        self.steps, self.values, self.codes = array("q"), array("d"), array("i")
        self.attempts, self.walls = array("q"), array("d")


def _going_back(lines: np.ndarray, codes: np.ndarray, steps: np.ndarray,
                last: np.ndarray) -> list[tuple[int, int, int]]:
    """(the first item of the line, the item whose series went back, the step it went back from)
    for each restart among items in file order; `last[code]` is each series' last step in the
    attempt in force (-1: none yet) and is left as it stands after the items. Restarts are rare,
    so each is found by one vectorised look at the items after the one before."""
    found = []
    start = 0
    while start < len(codes):
        c, s = codes[start:], steps[start:]
        order = np.argsort(c, kind="stable")  # by series, in file order within each
        previous = np.empty(len(c), dtype=np.int64)
        first = np.r_[True, c[order][1:] != c[order][:-1]]
        previous[order] = np.where(first, last[c[order]], np.r_[-1, s[order][:-1]])
        back = np.flatnonzero(s < previous)
        if not len(back):
            np.maximum.at(last, c, s)
            break
        stop = int(np.searchsorted(lines, lines[start + back[0]]))  # its line's first item
        np.maximum.at(last, codes[start:stop], steps[start:stop])
        found.append((stop, start + int(back[0]), int(previous[back[0]])))
        last[:] = -1
        start = stop
    return found
