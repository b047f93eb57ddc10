"""The metric rows of a log that a running trainer appends to, in file order, with its restarts.

Text logs, JSON Lines and CSV files share one rule: a step lower than the previous line's step is a
restart (the trainer resumed from a checkpoint and logs those steps again). A new attempt starts
there, its values win over the earlier ones for the same steps, and a `restart` event records the
line where it happened.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from monitor.schema import EventKind

from .imported_run import scalars_frame


class LoggedRows:
    def __init__(self) -> None:
        self.steps: list[int] = []
        self.keys: list[str] = []
        self.values: list[float] = []
        self.attempts: list[int] = []
        self.walls: list[float] = []
        self.events: list[dict] = []
        self.attempt = 1
        self.last_step: int | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def at_step(self, line: int, step: int) -> int:
        """Note that `line` logs `step`: a new attempt begins when the step goes back."""
        if self.last_step is not None and step < self.last_step:
            self.attempt += 1
            self.events.append({
                "step": step, "kind": EventKind.RESTART.value, "attempt": self.attempt,
                "payload": {"reason": f"step went back from {self.last_step} to {step}",
                            "line": line, "previous_step": self.last_step},
            })
        self.last_step = step
        return step

    def at_steps(self, first_line: int, steps: np.ndarray) -> np.ndarray:
        """`at_step` for consecutive lines at once (from `first_line` on): their attempts."""
        previous = np.empty(len(steps), dtype=np.int64)
        if len(steps):
            previous[0] = steps[0] if self.last_step is None else self.last_step
            previous[1:] = steps[:-1]
        attempts = np.full(len(steps), self.attempt, dtype=np.int64)
        for i in np.flatnonzero(steps < previous).tolist():
            self.last_step = int(previous[i])
            self.at_step(first_line + i, int(steps[i]))
            attempts[i:] = self.attempt
        if len(steps):
            self.last_step = int(steps[-1])
        return attempts

    def add(self, step: int, key: str, value: float, wall: float = math.nan) -> None:
        self.steps.append(step)
        self.keys.append(key)
        self.values.append(value)
        self.attempts.append(self.attempt)
        self.walls.append(wall)

    def scalars(self, with_wall_time: bool = False) -> pd.DataFrame:
        return scalars_frame(self.steps, self.keys, self.values, self.attempts,
                             wall_time=self.walls if with_wall_time else None)

    def take(self) -> pd.DataFrame:
        """The rows added since the last take (with wall_time), leaving the attempt as it is."""
        frame = self.scalars(with_wall_time=True)
        self.steps, self.keys, self.values, self.attempts, self.walls = [], [], [], [], []
        return frame
