"""The trainer's step as a W&B run declares it: `wandb.define_metric(name_or_glob, step_metric=key)`.

Hugging Face's Trainer (`*` on `train/global_step`), Lightning's WandbLogger (`*` on
`trainer/global_step`) and many custom loops tell W&B which logged key is the x axis of their
charts. That key is the trainer's step whatever it is called, so it is the run's step axis before
any guess from well-known names (step_axis.STEP_KEYS). A run file holds the declarations as
records of their own; the server (and a run folder's `config.yaml`) keeps them expanded, a metric
each, in the config's `_wandb.m` (`from_config`).

For one name W&B takes its own declaration before a glob's, and a later glob's before an earlier
one's. A run whose names are declared against several step keys (`train/*` on `train/step`,
`val/*` on `epoch`) takes the one most of its logged names are declared against; the others are
said in a note, since those metrics are placed at the step of their row, not at their own step
key. A declared key counts steps only when it holds whole numbers (not `epoch` at 0.25) and every
row that logs a metric declared against it logs it too (a loop that logs `epoch` once an epoch and
its loss every batch would otherwise put an epoch's batches on one step); else that is said, and
the run is read as if it had declared nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np

from ..step_axis import whole_steps

# The declared key is checked on the first items of a run (thousands of rows of a run of 100+
# series): a later value that is no step ends the import in one line, as a named step key's does.
CHECKED_ITEMS = 1_000_000


@dataclass(frozen=True)
class StepDeclaration:
    """One `define_metric` with a step metric: a name, or a glob when `glob`."""

    pattern: str
    glob: bool
    step_metric: str


@dataclass(frozen=True)
class LoggedItems:
    """What a run logged, an item a value: its history row, its name (a code into `names`) and the
    value, in file order."""

    names: list[str]
    row: np.ndarray
    code: np.ndarray
    value: np.ndarray

    def head(self, n: int = CHECKED_ITEMS) -> LoggedItems:
        return LoggedItems(self.names, self.row[:n], self.code[:n], self.value[:n])


def declared_step(declarations: list[StepDeclaration], logged: LoggedItems) -> tuple[str | None, list[str]]:
    """(the step key most logged names are declared against, notes), or (None, notes) when the run
    declares none for a name it logged, or the key it declares is no step counter (module rules).
    Only a step key the run logged counts."""
    names = logged.names
    steps = {d.step_metric for d in declarations if d.step_metric in set(names)}
    if not steps:
        return None, []
    bound: dict[str, list[str]] = {}
    for name in names:
        if name.startswith("_") or name in steps:
            continue
        step = _step_of(name, declarations)
        if step in steps:
            bound.setdefault(step, []).append(name)
    if not bound:
        return None, []
    counts = Counter({step: len(members) for step, members in bound.items()})
    chosen = counts.most_common(1)[0][0]
    why_not = _no_counter(chosen, bound[chosen], logged.head())
    if why_not:
        return None, [f"the run declares {chosen!r} as the W&B x axis of {_few(bound[chosen])}, but {why_not}, so "
                      "it is no step axis"]
    notes = [f"the run declares {step!r}, not {chosen!r}, as the W&B x axis of {len(members)} metric(s) "
             f"({_few(members)}): on gapwatch's one step axis each value sits at the step of the row that logged it"
             for step, members in bound.items() if step != chosen]
    return chosen, notes


def _no_counter(key: str, members: list[str], logged: LoggedItems) -> str:
    """Why `key` cannot count the steps of `members` ("" when it can): a value that is no whole
    number, or a row that logs one of them without it (W&B would place that value at the key's last
    value; one step would then hold several values of one metric)."""
    index = {name: i for i, name in enumerate(logged.names)}
    is_key = logged.code == index[key]
    values = logged.value[is_key]
    bad = values[~whole_steps(values)]
    if bad.size:
        return f"it is {float(bad[0])!r}, not a whole number"
    wanted = np.zeros(len(logged.names), dtype=bool)
    wanted[[index[m] for m in members]] = True
    with_key = np.zeros(int(logged.row.max(initial=-1)) + 1, dtype=bool)
    with_key[logged.row[is_key]] = True
    rows = np.unique(logged.row[wanted[logged.code]])
    without = rows[~with_key[rows]]
    if without.size:
        return f"{without.size:,} of the {rows.size:,} rows that log them do not log it"
    return ""


def from_config(internal: object) -> list[StepDeclaration]:
    """The declarations of a run's `_wandb` config value, whose `m` lists the metric definitions
    by protobuf field number: the name (`1`) or glob (`2`), and the step metric by name (`4`) or by
    its 1-based place in the list (`5`). Anything of another shape declares nothing."""
    if isinstance(internal, dict) and "m" not in internal and isinstance(internal.get("value"), dict):
        internal = internal["value"]
    entries = internal.get("m") if isinstance(internal, dict) else None
    if not isinstance(entries, list):
        return []
    entries = [e if isinstance(e, dict) else {} for e in entries]
    out = []
    for e in entries:
        pattern, glob = (_field(e, 2), True) if _field(e, 2) else (_field(e, 1), False)
        step = _field(e, 4)
        at = _field(e, 5)
        if not step and isinstance(at, int) and not isinstance(at, bool) and 1 <= at <= len(entries):
            step = _field(entries[at - 1], 1)
        if isinstance(pattern, str) and pattern and isinstance(step, str) and step:
            out.append(StepDeclaration(pattern, glob, step))
    return out


def _field(entry: dict, number: int):
    """A field of a definition: keyed by its number as text in JSON, as a number in config.yaml."""
    return entry.get(str(number), entry.get(number))


def _step_of(name: str, declarations: list[StepDeclaration]) -> str | None:
    exact = [d.step_metric for d in declarations if not d.glob and d.pattern == name]
    if exact:
        return exact[-1]
    globs = [d.step_metric for d in declarations if d.glob and fnmatchcase(name, d.pattern)]
    return globs[-1] if globs else None


def _few(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
