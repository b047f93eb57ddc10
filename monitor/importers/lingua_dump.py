"""Meta's lingua: the folder a training job dumps (`dump_dir`), read as one run.

lingua writes three JSON Lines files there, each line carrying the `global_step` it belongs to:

* `metrics.jsonl`: its MetricLogger appends one line per log interval while training (the names of
  the `lingua` profile: `loss/out`, `optim/*`, `speed/*`, `memory/*`). A job requeued after a
  preemption resumes from its last checkpoint and appends steps it logged already: a restart.
* `metrics.validation.jsonl`: one line per evaluation, a mapping per held-out source
  (`{"c4": {"nll_per_token": ..., "nll_per_char": ..., "nll": ..., "avg_seqlen": ...}}`).
* `metrics.eval.jsonl`: one line per evaluation, lm-eval's `results` (`{"hellaswag":
  {"acc,none": ..., "acc_stderr,none": ...}}`).

The evaluation files' names are read under `validation/` and `evals/` (the profile's rules tell
them apart from the training names), as sections of one run (`section_files`): evaluations run as
jobs of their own (`async_eval_gpus`), so they may be appended out of step order. Every line
carries the time it was written (`created_at`), which orders the three files' rows. An evaluation
file may also be imported alone.
"""

from __future__ import annotations

from pathlib import Path

from monitor.errors import GapwatchError

from .formats import Format, Probe
from .generic_table import parse_jsonl
from .imported_run import ImportedRun
from .section_files import first_object, joined, section_file

TRAIN_FILE = "metrics.jsonl"
EVAL_FILES = {"metrics.validation.jsonl": "validation/", "metrics.eval.jsonl": "evals/"}
STEP = "global_step"
# Fields of lingua's MetricLogger lines that a generic metrics.jsonl seldom has together.
_TRAIN_MARKS = (STEP, "acc_step")


def recognize(probe: Probe) -> bool:
    """A dump folder whose metrics.jsonl is lingua's, or one of its evaluation files."""
    if probe.is_dir:
        return all(k in first_object(probe.path / TRAIN_FILE) for k in _TRAIN_MARKS)
    return probe.path.name in EVAL_FILES and STEP in first_object(probe.path)


def parse_lingua(source: str | Path, step_key: str | None = None) -> ImportedRun:
    """A dump folder (training and evaluation files as one run), or one of its files."""
    path = Path(source)
    if not path.is_dir():
        run = parse_jsonl(path, step_key=step_key or STEP) if path.name == TRAIN_FILE else _evaluations(path, step_key)
        run.name_hint = path.parent.name or run.name_hint
        return run
    if not (path / TRAIN_FILE).is_file():
        raise GapwatchError(f"{path}: no {TRAIN_FILE} here: not the dump folder of a lingua job")
    train = parse_jsonl(path / TRAIN_FILE, step_key=step_key or STEP)
    read = [_evaluations(path / name, step_key) for name in EVAL_FILES if (path / name).is_file()]
    return joined(train, read, path, f"{path}: no evaluation files ({', '.join(EVAL_FILES)}): training values only")


def _evaluations(path: Path, step_key: str | None) -> ImportedRun:
    """One evaluation file, its names under its prefix (section_files)."""
    if path.name not in EVAL_FILES:
        raise GapwatchError(f"{path}: not one of lingua's evaluation files ({', '.join(EVAL_FILES)})")
    return section_file(path, EVAL_FILES[path.name], step_key or STEP)


FORMAT = Format("lingua", lambda source, options: parse_lingua(source, step_key=options.step_key),
                recognize, profile="lingua")
