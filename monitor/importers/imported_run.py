"""The one result every importer returns, and its conversion to the frames detectors read.

Rules every importer follows, so that a run means the same thing whatever file it came from:

* `scalars` is long: one row per logged (step, key) with the value as float64, in the order the
  source logged it, keys already mapped onto gapwatch's names by a profile.
* `attempt` numbers the logging processes inside one source: 1 for the first, +1 each time the
  source restarts (a series logged at a lower step than it last had, see each importer's rule).
* The same (key, step) logged twice: the later row wins. Within one attempt that is a duplicate
  line; across attempts it is a restart re-logging steps it had already logged (the latest attempt
  wins, exactly as the store does), and the earlier values stay visible in `RunData.repeats`.
* Logged NaN/Inf are values, not gaps: they stay in `scalars` and are listed in
  `RunData.logged_nonfinite`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from monitor.schema import RunData, RunInfo, empty_events

def empty_scalars() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": pd.Series(dtype="int64"),
            "key": pd.Series(dtype=str),
            "value": pd.Series(dtype="float64"),
            "attempt": pd.Series(dtype="int64"),
        }
    )


def scalars_frame(steps, keys, values, attempts=None, wall_time=None) -> pd.DataFrame:
    """A long scalars frame with the column types every consumer expects.

    keys may be a pandas Categorical (kept as is: large imports repeat a few names millions of
    times); anything else becomes str. wall_time (seconds since the epoch, NaN where unknown) is
    added only when the source has it. The frame shares the arrays it is given when their types
    are already right (an import hands over millions of rows a chunk): a caller does not change
    them afterwards.
    """
    steps = np.asarray(steps, dtype="int64")
    if attempts is None:
        attempts = np.ones(len(steps), dtype="int64")
    if isinstance(keys, pd.Categorical) or isinstance(
            getattr(keys, "dtype", None), pd.CategoricalDtype):
        key_col = pd.Series(keys, copy=False).array
    else:
        key_col = pd.Series(keys, dtype=str).to_numpy()
    columns = {
        "step": steps,
        "key": key_col,
        "value": np.asarray(values, dtype="float64"),
        "attempt": np.asarray(attempts, dtype="int64"),
    }
    if wall_time is not None:
        columns["wall_time"] = np.asarray(wall_time, dtype="float64")
    return pd.DataFrame(columns, copy=False)


def resumed_launches(firsts: list[int | None]) -> bool:
    """Whether launches of a trainer (TensorBoard's or Lightning's version folders), by the step
    each began at in the order they were started, are one run resumed again and again: each later
    one begins above where the first began (from a checkpoint), where a new run of a sweep or a
    second launch from scratch begins where the first did. A launch whose start is unknown (None)
    makes them no one run."""
    return firsts[0] is not None and all(s is not None and s > firsts[0] for s in firsts[1:])


@dataclass
class ImportedRun:
    """A run read from a file or a server, before it goes into a store.

    name_hint:  a run name the source suggests (W&B display name, file stem); the CLI's --run wins.
    scalars:    long frame: step int64, key str, value float64, attempt int64 (see module rules).
    config:     the run's settings as the source recorded them (nested dicts allowed).
    summary:    final values the source reports (W&B summary, lm-eval versions...), informational.
    events:     dicts with step, kind (monitor.schema.EventKind value), payload [, attempt].
    source:     where it came from: a path or URL, for the runs table and error messages.
    tokens_per_step: tokens in one optimizer step when the source says so (None otherwise).
    profile:    name of the metric-name profile that mapped the keys; before they are mapped, the
                one the source's own files say it follows (T5X's gin config), preferred on a tie.
    key_map:    source metric name -> gapwatch key, for every source name that was kept.
    notes:      one line per thing a person should know about the import (skipped lines...).
    live:       the source is still being written (a W&B run without its exit record).
    crashed:    the source stops inside a record (its writer was killed): what is complete is here.
    mapping:    one row per source name (`meaning.mapping_rows`): what it became and why.
    step_key:   the source name the run itself declares as its trainer's step (a W&B run's
                `define_metric(..., step_metric=...)`), taken as the step axis before a guess.
    """

    name_hint: str
    scalars: pd.DataFrame = field(default_factory=empty_scalars)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""
    tokens_per_step: float | None = None
    profile: str | None = None
    key_map: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    live: bool = False
    crashed: bool = False
    mapping: list[dict[str, Any]] = field(default_factory=list)
    step_key: str | None = None

    @property
    def keys(self) -> list[str]:
        return sorted(self.scalars["key"].unique().tolist())

    @property
    def attempts(self) -> int:
        return int(self.scalars["attempt"].max()) if len(self.scalars) else 1

    def to_run_data(self, name: str | None = None) -> RunData:
        """The wide, full-resolution view detectors use: the later row of a repeated step wins."""
        name = name or self.name_hint
        long = self.scalars
        codes, names = pd.factorize(long["key"], sort=False)
        steps = long["step"].to_numpy()
        # Later rows win: a stable sort by (key, step) keeps file order among equal pairs, and
        # attempts only grow along the file, so "last" is also "latest attempt".
        order = np.lexsort((steps, codes))
        c, s = codes[order], steps[order]
        same_as_next = np.zeros(len(c), dtype=bool)
        same_as_next[:-1] = (c[1:] == c[:-1]) & (s[1:] == s[:-1])
        same_as_prev = np.zeros(len(c), dtype=bool)
        same_as_prev[1:] = same_as_next[:-1]
        ordered = long.iloc[order]
        latest = ordered[~same_as_next]
        repeats = ordered.loc[same_as_next | same_as_prev, ["key", "step", "attempt", "value"]]
        repeats = repeats.reset_index(drop=True)
        repeats["key"] = repeats["key"].astype(str)
        if len(latest):
            lc = c[~same_as_next]
            row_steps, row_of = np.unique(s[~same_as_next], return_inverse=True)
            grid = np.full((len(row_steps), len(names)), np.nan)
            grid[row_of, lc] = latest["value"].to_numpy()
            present = np.zeros(len(names), dtype=bool)
            present[lc] = True
            wide = pd.DataFrame(grid[:, present], index=pd.Index(row_steps, dtype="int64"),
                                columns=pd.Index([str(n) for n in np.asarray(names)[present]]))
            wide = wide[sorted(wide.columns)]
        else:
            wide = pd.DataFrame(index=pd.Index([], dtype="int64"))
        wide.index = wide.index.astype("int64")
        wide.index.name = "step"
        wide = wide.astype("float64")
        finite = np.isfinite(latest["value"].to_numpy())
        nonfinite = latest.loc[~finite, ["key", "step", "value"]].reset_index(drop=True)
        nonfinite["key"] = nonfinite["key"].astype(str)
        info = RunInfo(
            name=name,
            tokens_per_step=self.tokens_per_step,
            config=dict(self.config),
        )
        return RunData(
            info=info,
            scalars=wide,
            events=self.events_frame(),
            repeats=repeats,
            logged_nonfinite=nonfinite,
        )

    def events_frame(self) -> pd.DataFrame:
        if not self.events:
            return empty_events()
        frame = pd.DataFrame(
            {
                "step": pd.Series([int(e["step"]) for e in self.events], dtype="int64"),
                "kind": pd.Series([str(e["kind"]) for e in self.events], dtype=str),
                "attempt": pd.Series(
                    [int(e.get("attempt", 1)) for e in self.events], dtype="int64"
                ),
                "payload": pd.Series([dict(e.get("payload", {})) for e in self.events],
                                     dtype=object),
            }
        )
        return frame.sort_values("step", kind="stable").reset_index(drop=True)
