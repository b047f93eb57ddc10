"""W&B history saved from `run.history()`: a sample of the run's rows, not the rows.

`run.history()` of W&B's public API returns `samples` rows (500 unless asked for more), drawn from
the run's history for speed; `run.scan_history()` returns every row. Saved to CSV, JSON Lines or
Parquet, a sample holds true values at true steps, only few of them, and nothing in it says so: a
reference read from it looks sparser than it ran, and at times it is not even in step order
(wandb/wandb issues 1783 and 5994).

A complete history numbers its rows `_step` 0, 1, 2, ... or at the steps its trainer passed to
`wandb.log`, at one cadence: one gap between consecutive rows nearly everywhere, others only
where evaluations or a resume fall (in the OLMo exports of the shared data, the commonest gap
holds 71% to 100% of them). Rows drawn at random from such a history leave gaps of every length.
So rows whose commonest `_step` gap holds under half of the gaps are said to look sampled.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from monitor.errors import GapwatchError

# Rows too few to tell a cadence from a sample: a short run's history is left alone.
MIN_ROWS = 20
ADVICE = "export every row with run.scan_history() (run.history() returns 500 rows by default)"


class HistorySample:
    """The `_step` of a W&B history's rows, seen in file order, part by part."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.gaps: Counter[int] = Counter()  # rows by the `_step` gap from the row before them
        self.first: int | None = None
        self.last: int | None = None

    def add(self, row_steps: np.ndarray) -> None:
        """The `_step` of the next values or rows (a row's values repeat its step); a step that
        goes back is refused (`went_back`)."""
        steps = np.asarray(row_steps, dtype=np.int64)
        if self.last is not None:
            steps = np.concatenate(([self.last], steps))
        if not len(steps):
            return
        gaps = np.diff(steps)
        back = np.flatnonzero(gaps < 0)
        if len(back):
            raise GapwatchError(went_back(self.source, int(steps[back[0] + 1]), int(steps[back[0]])))
        gaps = gaps[gaps != 0]  # a row's further values, not a new row
        values, counts = np.unique(gaps, return_counts=True)
        self.gaps.update(dict(zip(values.tolist(), counts.tolist())))
        self.first = int(steps[0]) if self.first is None else self.first
        self.last = int(steps[-1])

    @property
    def rows(self) -> int:
        return sum(self.gaps.values()) + (self.first is not None)

    def looks_sampled(self) -> bool:
        if self.rows < MIN_ROWS:
            return False
        return max(self.gaps.values()) * 2 < self.rows - 1

    def note(self) -> str | None:
        """A note saying the rows look like a sample, else None."""
        if not self.looks_sampled():
            return None
        return (f"{self.source}: {self.rows:,} rows whose W&B _step skips irregularly over "
                f"{self.first:,}..{self.last:,}: this looks like a sample of the run's "
                f"history, not every row; {ADVICE}")


def went_back(source_line: str, step, previous) -> str:
    """The refusal of a W&B history whose `_step` goes back at a line (`<file>: line N`)."""
    return (f"{source_line}: step {step} after step {previous}: W&B steps only grow, so the export "
            "is damaged, joins several runs, or is a sample from run.history(), whose rows are not "
            f"always in step order; {ADVICE}")


__all__ = ["ADVICE", "HistorySample", "went_back"]
