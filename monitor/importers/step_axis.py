"""The trainer's own step as a run's step axis, for sources whose step is a row counter.

W&B numbers its history rows (`_step`); a trainer that logs its own step (HF Trainer's
`train/global_step`, nanoGPT's `iter`, a custom loop's `step`) logs it as one more value in the row,
and only that number lines a run up with another by step (LLaMA-Factory: `_step` 0..15 where the
trainer's step runs 10..156). Rules:

* The step key is the one named (`--step-key`, a profile's `step_key`), else that of a trainer
  whose marker the names carry (`profiles.marked_step_key`: LitGPT's loggers number rows by
  micro-batch and it logs its optimizer step as `step`), else the one the run declares (a W&B
  run's `define_metric(..., step_metric=...)`, wandb/step_metric.py), else the first of STEP_KEYS
  the run logs; W&B's `_step` stays the axis only when the run logs none of them. A source with
  steps of its own (TensorBoard) is put on a named or marked step key only.
* A row without the step key belongs to the step logged before it (an evaluation logged in its own
  `wandb.log` call after the training row); rows before the first step key take the first one.
* Rows that land on one step are one step: their values are merged (a key given twice keeps the
  later value, as everywhere in `imported_run`).
* A row that logs a series at a lower step than that series last had is a rewind (a loop that
  reloaded a checkpoint): a new attempt, whose values win at the steps it covers, never a silent
  overwrite. A lower step alone is not (Lightning's WandbLogger gives a validation loss logged per
  batch its count of validation batches as the trainer's step): the rule of `logged_rows`.
* The step key itself is the axis, not a metric: its rows leave the scalars.

W&B history written out as JSON Lines (`files/wandb-history.jsonl` of a run folder from wandb <
0.10, or `run.history()` saved by hand) or as Parquet (`run.history().to_parquet(...)`, the history
files W&B keeps for a run) has W&B's `_step` in every row: such a log
(`is_wandb_history`) is read on `_step` like any W&B history, then put on the trainer's step
by the same rules, so a row that lacks the trainer's step key (an evaluation row) joins the step
before it instead of landing on a row counter.

A source followed as it grows (`import --follow`) is read a part at a time: `StepAxisInParts`
chooses the step key on the first part that logs anything (by the same rule, among that part's
names) and carries the step and attempt in force from each part to the next, so the parts land
where a whole read of the file puts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .imported_run import ImportedRun, scalars_frame
from .logged_rows import SeriesAttempts
from .profiles import marked_step_key

STEP_KEYS = ("train/global_step", "trainer/global_step", "global_step", "iter", "step", "Step",
             "trainer/step")


WANDB_ROW_KEY = "_step"
# Enough of a JSONL file to hold its first line (W&B rows are a few KB at most).
_FIRST_LINE_BYTES = 1 << 20


def is_wandb_history(path, fmt: str) -> bool:
    """A JSON Lines file whose first line is an object with W&B's `_step`, or a Parquet table with
    an integer `_step` column (see module rules)."""
    if fmt == "parquet":
        return _parquet_row_counter(path)
    if fmt != "jsonl":
        return False
    try:
        with open(path, "rb") as fh:
            first = fh.read(_FIRST_LINE_BYTES).lstrip().split(b"\n", 1)[0]
        row = json.loads(first)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(row, dict) and isinstance(row.get(WANDB_ROW_KEY), int)


def _parquet_row_counter(path) -> bool:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return False
    return WANDB_ROW_KEY in schema.names and pa.types.is_integer(schema.field(WANDB_ROW_KEY).type)


def choose_step_key(names, wanted: str | None = None, source: str = "", declared: str | None = None) -> str | None:
    """The key that holds the trainer's step: `wanted` (an error when the run lacks it), else a
    marked trainer's (`profiles.marked_step_key`), else the one the run `declared`
    (ImportedRun.step_key) when it logs it, else the first of STEP_KEYS among names, else None
    (the source's own step stays the axis)."""
    names = set(map(str, names))
    if wanted:
        if wanted not in names:
            shown = ", ".join(sorted(n for n in names if not n.startswith("_"))[:8])
            raise GapwatchError(f"{source or 'input'}: step key {wanted!r} is not logged in this "
                                f"run (it logs {shown})")
        return wanted
    marked = marked_step_key(names)
    if marked:
        return marked
    if declared in names:
        return declared
    return next((k for k in STEP_KEYS if k in names), None)


@dataclass
class StepCarry:
    """Where a source read in parts stood after its last part: the trainer step in force (None
    before the step key's first value), the attempt and each series' last step in it."""

    step: int | None = None
    series: SeriesAttempts = field(default_factory=SeriesAttempts)


def whole_steps(values: np.ndarray) -> np.ndarray:
    """Which values can be a step: whole numbers from 0 below 2**63 (which would wrap around to a
    negative int64)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values >= 0) & (values < 2.0**63) & (values == np.round(values))


def on_trainer_step(run: ImportedRun, step_key: str,
                    carry: StepCarry | None = None) -> ImportedRun:
    """run with its step axis replaced by the values of `step_key` (see the module rules).
    carry: for one part of a source read in parts, where the parts before it ended (updated)."""
    s = run.scalars
    if not len(s):
        return run
    before = carry.step if carry is not None else None
    steps = s["step"].to_numpy()
    attempts = s["attempt"].to_numpy()
    # Source rows: runs of items with one (attempt, step), in file order.
    new_row = np.ones(len(s), dtype=bool)
    new_row[1:] = (steps[1:] != steps[:-1]) | (attempts[1:] != attempts[:-1])
    row_of = np.cumsum(new_row) - 1
    n_rows = int(row_of[-1]) + 1
    is_key = (s["key"] == step_key).to_numpy()
    if not is_key.any() and before is None:
        return run
    values = s["value"].to_numpy(dtype="float64")
    row_step = np.full(n_rows, np.nan)
    row_step[row_of[is_key]] = values[is_key]  # the last of a row's values wins
    bad = np.flatnonzero(is_key & ~whole_steps(values))
    if len(bad):
        i = int(bad[0])
        raise GapwatchError(f"{run.source}: {step_key} is {float(values[i])!r} at row {int(steps[i])}: "
                            f"not a whole number from 0 to {MAX_STEP}, so it cannot be the step "
                            "axis")
    if before is not None and np.isnan(row_step[0]):
        row_step[0] = before  # rows of the step the last part ended on
    filled = pd.Series(row_step).ffill().bfill().to_numpy().astype(np.int64)
    keep = ~is_key
    new_attempt, rewinds = _attempts(row_of[keep], s["key"][keep], attempts[keep], filled,
                                     carry.series if carry is not None else SeriesAttempts())
    if carry is not None:
        carry.step = int(filled[-1])
    wall = s["wall_time"].to_numpy()[keep] if "wall_time" in s else None
    first, last = int(filled.min()), int(filled.max())
    old_lo, old_hi = int(steps.min()), int(steps.max())
    run.scalars = scalars_frame(filled[row_of][keep], s["key"][keep], values[keep], new_attempt,
                                wall_time=wall)
    step_at = dict(zip(steps[new_row].tolist(), filled.tolist()))
    for event in run.events:
        event["step"] = step_at.get(int(event["step"]), int(event["step"]))
    note = (f"step axis: {step_key} (the trainer's step, {first}..{last}); the source's own "
            f"steps ran {old_lo}..{old_hi}")
    if rewinds:
        note += f"; {rewinds} rewind(s) to an earlier step, each kept as a new attempt"
    run.notes.append(note)
    return run


def _attempts(rows: np.ndarray, keys: pd.Series, source_attempts: np.ndarray, row_step: np.ndarray,
              series: SeriesAttempts) -> tuple[np.ndarray, int]:
    """Each value's attempt on the trainer's step, and the number of rewinds: the source's own
    attempts (a resumed run's segments) each start one, and so does a rewind within them. W&B's
    own keys (`_runtime`, `_timestamp`) are in every row and follow no series of the trainer's."""
    ours = ~keys.astype(str).str.startswith("_").to_numpy()
    codes, uniques = pd.factorize(keys[ours])
    names = [str(u) for u in uniques]
    row_attempt = np.empty(len(row_step), dtype=np.int64)
    rewinds = 0
    segments = np.flatnonzero(np.diff(source_attempts)) + 1  # value positions where a segment begins
    starts = np.r_[0, rows[segments]]
    for n, (a, b) in enumerate(zip(starts, np.r_[starts[1:], len(row_step)])):
        if n:
            series.attempt += 1
            series.last_of = {}
        inside = ours & (rows >= a) & (rows < b)
        part_rows = rows[inside] - a
        row_attempt[a:b], found = series.lines(int(b - a), part_rows, codes[inside[ours]], names,
                                               row_step[rows[inside]])
        rewinds += len(found)
    return row_attempt[rows], rewinds


class StepAxisInParts:
    """The trainer's step for a source read a part at a time (see the module rules).
    wanted: the step key named (`--step-key`, a profile's); else chosen from the first part."""

    def __init__(self, wanted: str | None = None) -> None:
        self.wanted = wanted
        self.key: str | None = None
        self.decided = False
        self.carry = StepCarry()

    def apply(self, run: ImportedRun) -> ImportedRun:
        """One part (rows in source order, after the parts before it) on the trainer's step."""
        if not len(run.scalars):
            return run
        if not self.decided:
            names = [str(n) for n in pd.unique(run.scalars["key"])]
            self.key = choose_step_key(names, self.wanted, run.source, run.step_key)
            self.decided = True
        if self.key is None:
            return run
        return on_trainer_step(run, self.key, carry=self.carry)


__all__ = ["STEP_KEYS", "WANDB_ROW_KEY", "StepAxisInParts", "StepCarry",
           "choose_step_key", "is_wandb_history", "on_trainer_step", "whole_steps"]
