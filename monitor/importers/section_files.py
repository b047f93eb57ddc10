"""A run its trainer writes as several JSON Lines files, one per section of the job (training, each
held-out validation, each evaluation), read as one run.

The training file is read as any metric log (a step that goes back is a restart). Each other
section's names are read under its prefix (`validation/`, `valid/c4/`), every line in one attempt:
evaluations run beside training, or as jobs of their own, and may be appended out of step order,
so there a lower step is no restart, and of a step evaluated twice the line written last wins.

When every line carries the time it was written, the rows of all the files are given in that order:
a folder read again while the job runs has only rows after the ones read before (the import takes
up where it stopped, `store_writer`), wherever in its files they were appended. Without those
times the files are given one after the other, and a folder whose training file grew since an
import is refused as changed. Used by `lingua_dump` and `fairseq2_metrics`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .generic_table import parse_jsonl
from .imported_run import ImportedRun, scalars_frame

# Detection reads a bounded part of a first line: a line is a few dozen fields, and a file of one
# huge line is not read whole to find that out.
_FIRST_LINE_BYTES = 1 << 20


def first_object(path: Path) -> dict:
    """A section file's first line as an object, {} where it is none (or the file is unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            obj = json.loads(fh.readline(_FIRST_LINE_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


def section_file(path: Path, prefix: str, step_key: str | None) -> ImportedRun:
    """One section's file: its names under `prefix`, every line in one attempt (module rules)."""
    run = parse_jsonl(path, step_key=step_key)
    s = run.scalars
    keys = prefix + s["key"].astype(str)
    run.scalars = scalars_frame(s["step"].to_numpy(), keys.to_numpy(), s["value"].to_numpy(),
                                wall_time=s["wall_time"].to_numpy() if "wall_time" in s else None)
    run.events = []
    return run


def joined(train: ImportedRun, sections: list[ImportedRun], source: Path, missing_note: str) -> ImportedRun:
    """The training file's run with its sections' rows, in the order written (module rules);
    `missing_note` is said when no section holds a value."""
    parts = [s.scalars for s in sections if len(s.scalars)]
    notes = train.notes + [n for s in sections for n in s.notes]
    if not parts:
        notes.append(missing_note)
    scalars = pd.concat([train.scalars, *parts], ignore_index=True) if parts else train.scalars
    return ImportedRun(name_hint=source.name, scalars=_in_written_order(scalars), events=train.events,
                       source=str(source), notes=notes)


def _in_written_order(scalars: pd.DataFrame) -> pd.DataFrame:
    """Rows by the time their line was written, those of one time in file order (module rules)."""
    if "wall_time" not in scalars or not np.isfinite(scalars["wall_time"].to_numpy()).all():
        return scalars
    order = np.argsort(scalars["wall_time"].to_numpy(), kind="stable")
    return scalars.iloc[order].reset_index(drop=True)
