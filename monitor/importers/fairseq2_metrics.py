"""Meta's fairseq2: the `metrics/` folder its JSON Lines recorder writes in a job's output directory,
read as one run.

fairseq2's `JsonlMetricRecorder` appends one line per published set of values to
`metrics/<section>.jsonl`: `train.jsonl` while training, `valid.jsonl` (or `valid/<unit>.jsonl`, one
per validation unit) at each validation, `eval.jsonl` from a standalone evaluation. Each line is
`{"Time": <ISO 8601, UTC>, "Step": <the train step>, <display name>: <value>, ...}`, the names as its
metric descriptors display them ("NLL Loss", "Gradient Norm", "Learning Rate"; the `fairseq2`
profile says what they are). A job resumed from a checkpoint appends to the same files: in the
training file a step that goes back is a restart.

The validation files' names are read under their section (`valid/NLL Loss`, as fairseq2's W&B
recorder names them), as sections of one run (`section_files`); `Time` orders the files' rows.
A standalone evaluation's lines have no step (it belongs to no point of a training run): such a
file is left out with a note. The folder, or the output directory holding it, is the source.
"""

from __future__ import annotations

from pathlib import Path

from monitor.errors import GapwatchError

from .formats import Format, Probe
from .generic_table import parse_jsonl
from .imported_run import ImportedRun
from .section_files import first_object, joined, section_file

METRICS_DIR = "metrics"
TRAIN_FILE = "train.jsonl"
STEP, TIME = "Step", "Time"


def metrics_folder(path: Path) -> Path | None:
    """The recorder's folder: `path` itself, or the `metrics/` of the output directory `path`."""
    for folder in (path, path / METRICS_DIR):
        if (folder / TRAIN_FILE).is_file():
            return folder
    return None


def recognize(probe: Probe) -> bool:
    """A folder whose training file's lines open with the recorder's two fields, in its order."""
    folder = metrics_folder(probe.path) if probe.is_dir else None
    return folder is not None and list(first_object(folder / TRAIN_FILE))[:2] == [TIME, STEP]


def parse_fairseq2(source: str | Path, step_key: str | None = None) -> ImportedRun:
    """The training file and every validation file of the recorder's folder, as one run."""
    path = Path(source)
    folder = metrics_folder(path)
    if folder is None:
        raise GapwatchError(f"{path}: no {TRAIN_FILE} here or in {METRICS_DIR}/: not a fairseq2 output directory")
    train = parse_jsonl(folder / TRAIN_FILE, step_key=step_key or STEP)
    sections, notes = [], []
    for file in sorted(folder.rglob("*.jsonl")):
        if file == folder / TRAIN_FILE:
            continue
        name = file.relative_to(folder).with_suffix("").as_posix()
        if STEP not in first_object(file):
            notes.append(f"{file}: left out: its values have no {STEP} (a standalone evaluation "
                         "belongs to no step of a training run)")
            continue
        sections.append(section_file(file, f"{name}/", step_key or STEP))
    run = joined(train, sections, path, f"{folder}: no validation files beside {TRAIN_FILE}: training values only")
    run.notes += notes
    if path.name == METRICS_DIR:
        run.name_hint = path.parent.name or run.name_hint  # the output directory names the job
    return run


FORMAT = Format("fairseq2", lambda source, options: parse_fairseq2(source, step_key=options.step_key),
                recognize, profile="fairseq2")
