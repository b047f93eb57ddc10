"""MLflow's file store: a run folder `mlruns/<experiment id>/<run id>/` (what `mlflow.log_metric`
writes under `file:` tracking, the layout of every `mlruns/` folder before MLflow 3 and of many
since), or an experiment or `mlruns/` folder holding one run.

A run folder holds `meta.yaml` (its name, status, times), `metrics/<key>` (a file a metric, a key
with `/` in it a path: `metrics/eval/loss`), each line `timestamp_ms value step` (files of MLflow
before 1.0 have no step: step 0), `params/<name>` (one value a file) and `tags/`. Source names are
the metric keys as logged; the Hugging Face Trainer's MLflow callback logs its own (`loss`,
`learning_rate`, `eval_loss`, and `train_loss` at the end: the mean over the run) with its
TrainingArguments as params: such a run's names are read as its W&B callback gives them
(`train/loss`, `eval/loss`, `train/train_loss`), so that the `hf` profile reads them.

Rules:
* Values are replayed in the order they were logged (their timestamps, a file's own order among
  equal ones) under the restart rule of logged_rows.py: a run resumed with
  `mlflow.start_run(run_id=...)` from an earlier checkpoint logs steps again, a second attempt.
* A line that is not `timestamp value [step]` is an error naming the file and line.
* `params/` fill `config`, numbers read as such. A run MLflow still marks RUNNING is live; one it
  marks FAILED or KILLED is said to have ended so.
* A folder of several runs is refused with their names, so that the user picks one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .formats import Format, Probe
from .hf_trainer_state import source_name
from .imported_run import ImportedRun
from .input_checks import setting, shown
from .logged_rows import LoggedRows

# TrainingArguments every Hugging Face Trainer's MLflow callback logs as params.
_HF_TRAINER_PARAMS = {"per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps"}
# RunStatus in MLflow's protos, as its file store writes it.
_STATUS_NAMES = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}


def is_run_folder(path: Path) -> bool:
    return (path / "meta.yaml").is_file() and (path / "metrics").is_dir()


def run_folders(path: Path) -> list[Path]:
    """The run folders at or under `path` (a run, an experiment, or an mlruns folder; deleted runs
    in `.trash` left out)."""
    if is_run_folder(path):
        return [path]
    found = []
    for child in sorted(p for p in path.iterdir() if p.is_dir() and p.name != ".trash"):
        if is_run_folder(child):
            found.append(child)
        elif (child / "meta.yaml").is_file():  # an experiment of mlruns/
            found.extend(sorted(r for r in child.iterdir() if r.is_dir() and is_run_folder(r)))
    return found


def recognize(probe: Probe) -> bool:
    """A run folder, or a folder of them (an experiment, mlruns/). Asked before TensorBoard: a run
    often keeps event files among its artifacts."""
    return probe.is_dir and bool(run_folders(probe.path))


def parse_mlflow_run(source: str | Path) -> ImportedRun:
    source = Path(source)
    runs = run_folders(source)
    if not runs:
        raise GapwatchError(f"{source}: no MLflow run folder (meta.yaml and metrics/) here")
    if len(runs) > 1:
        listed = "; ".join(f"{_name(r)} ({r.relative_to(source)})" for r in runs[:10])
        raise GapwatchError(f"{source}: {len(runs)} MLflow runs here: import one run folder: {listed}"
                            + (" ..." if len(runs) > 10 else ""))
    folder = runs[0]
    meta = _meta(folder)
    logged = [_metric(folder, path) for path in sorted((folder / "metrics").rglob("*")) if path.is_file()]
    if not logged or not sum(len(m[2]) for m in logged):
        raise GapwatchError(f"{folder}: the MLflow run logged no metric values: nothing to import")
    keys = np.concatenate([np.full(len(m[2]), i) for i, m in enumerate(logged)])
    times, steps, values = (np.concatenate([m[c] for m in logged]) for c in (1, 2, 3))
    params = _params(folder)
    rows = replayed(trainer_names([m[0] for m in logged], params), keys, times, steps, values)
    status = _STATUS_NAMES.get(meta.get("status"))
    return ImportedRun(name_hint=_name(folder), scalars=rows.scalars(with_wall_time=True), events=rows.events,
                       source=str(folder), config=params, notes=ended_notes(folder, status),
                       live=status == "RUNNING")


def replayed(names: list[str], codes: np.ndarray, times_ms: np.ndarray, steps: np.ndarray,
             values: np.ndarray) -> LoggedRows:
    """A run's values (series names[codes[i]]) replayed in the order they were logged: by their
    timestamps, the order given among equal ones (module rules)."""
    rows = LoggedRows()
    for i in np.lexsort((np.arange(len(codes)), times_ms)):
        rows.at_step(int(i) + 1, int(steps[i]))
        rows.add(int(steps[i]), names[codes[i]], float(values[i]), float(times_ms[i]) / 1000.0)
    return rows


def trainer_names(names: list[str], params: dict) -> list[str]:
    """Metric names as the Hugging Face Trainer's W&B callback gives them (`loss` -> `train/loss`,
    hf_trainer_state.source_name) where the run was logged by the Trainer's MLflow callback, which
    logs the Trainer's own names with its TrainingArguments as params; else the names as they are."""
    if not _HF_TRAINER_PARAMS <= params.keys():
        return names
    return [source_name(n) for n in names]


def ended_notes(where, status: str | None) -> list[str]:
    """A note for a run MLflow marks FAILED or KILLED."""
    if status not in ("FAILED", "KILLED"):
        return []
    return [f"{where}: MLflow marks the run {status}: what it logged before it ended is imported"]


def _metric(folder: Path, path: Path) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """(key, timestamps, steps, values) of one metric file, the steps as integers (a float would
    round those above 2**53)."""
    key = path.relative_to(folder / "metrics").as_posix()
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GapwatchError(f"{path}: cannot read: {exc}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) not in (2, 3):
                raise ValueError
            stamp, value = float(fields[0]), float(fields[1])
            step = int(fields[2]) if len(fields) == 3 else 0
        except ValueError:
            raise GapwatchError(f"{path}: line {number}: not 'timestamp value step': {shown(line)}") from None
        if not 0 <= step <= MAX_STEP:
            raise GapwatchError(f"{path}: line {number}: step {step} is outside 0..{MAX_STEP}")
        out.append((stamp, step, value))
    stamps, steps, values = zip(*out) if out else ((), (), ())
    return (key, np.array(stamps, dtype=float), np.array(steps, dtype=np.int64),
            np.array(values, dtype=float))


def _meta(folder: Path) -> dict:
    try:
        meta = yaml.safe_load((folder / "meta.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise GapwatchError(f"{folder / 'meta.yaml'}: not readable as MLflow's run metadata: {exc}") from None
    return meta if isinstance(meta, dict) else {}


def _name(folder: Path) -> str:
    tag = folder / "tags" / "mlflow.runName"
    if tag.is_file():
        return tag.read_text(encoding="utf-8", errors="replace").strip() or folder.name
    name = _meta(folder).get("run_name") if (folder / "meta.yaml").is_file() else None
    return str(name) if name else folder.name


def _params(folder: Path) -> dict:
    out = {}
    for path in sorted((folder / "params").rglob("*")) if (folder / "params").is_dir() else ():
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace").strip()
            out[path.relative_to(folder / "params").as_posix()] = setting(text)
    return out


FORMAT = Format("mlflow", lambda source, options: parse_mlflow_run(source), recognize)
