"""MLflow's database store as a SQLite file: what MLflow 3 tracks into unless told otherwise
(`mlflow.db` in the folder it started in; any `sqlite:///path` tracking URI), read without MLflow
and without writing to it.

Its tables are MLflow's own, queried by `monitor.store.mlflow_tables` (only the store speaks SQL).

Rules:
* A database holds every run tracked into it. The one imported is named with --run (its name, or
  its id where runs share a name), or each with --all-runs; a database of one run needs neither.
  Deleted runs are left out.
* Values are replayed in the order they were logged (their timestamps, the order they were written
  among equal ones) under the restart rule of logged_rows.py, as the file store's are
  (`mlflow_runs`).
* MLflow stores a NaN as 0 with `is_nan` set and an infinity as the largest float of its sign: they
  are read back as the NaN and infinities that were logged.
* `params` fill `config`, numbers read as such. A run MLflow still marks RUNNING is live; one it
  marks FAILED or KILLED is said to have ended so. A run the Hugging Face Trainer logged has its
  names read as the file store's are (`mlflow_runs.trainer_names`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP
from monitor.store import mlflow_tables

from .formats import Format, Probe, ReadOptions
from .imported_run import ImportedRun
from .input_checks import setting
from .mlflow_runs import ended_notes, replayed, trainer_names

_SQLITE_MAGIC = "SQLite format 3\x00"


def recognize(probe: Probe) -> bool:
    return not probe.is_dir and probe.head.startswith(_SQLITE_MAGIC) and mlflow_tables.is_mlflow_database(probe.path)


def _runs(path: Path) -> list[tuple[str, str, str | None]]:
    """(run id, name to pick it by, status) of every run not deleted: its name, or its id where
    another run has the same name or it has none."""
    found = mlflow_tables.runs(path)
    names = [name for _, name, _ in found]
    return [(run_id, name if name is not None and names.count(name) == 1 else run_id, status)
            for run_id, name, status in found]


def database_runs(source: str | Path) -> list[str]:
    """The names the runs of a database are picked by (`_runs`)."""
    return [name for _, name, _ in _runs(Path(source))]


def parse_mlflow_db(source: str | Path, options: ReadOptions = ReadOptions()) -> ImportedRun:
    """One run of an MLflow database (`options.source_run` names it where it holds several)."""
    path = Path(source)
    runs = _runs(path)
    wanted = options.source_run
    if wanted is not None:
        chosen = [run for run in runs if wanted in run[:2]]
        if not chosen:
            raise GapwatchError(f"{path}: no MLflow run {wanted!r} here (runs: {', '.join(r[1] for r in runs)})")
    elif len(runs) > 1:
        listed = ", ".join(r[1] for r in runs[:10]) + (" ..." if len(runs) > 10 else "")
        raise GapwatchError(f"{path}: {len(runs)} MLflow runs here ({listed}): import one with --run NAME, "
                            "or each with --all-runs")
    else:
        chosen = runs
    if not chosen:
        raise GapwatchError(f"{path}: the MLflow database holds no run")
    run_id, name, status = chosen[0]
    rows = mlflow_tables.metrics(path, run_id)
    if not rows:
        raise GapwatchError(f"{path}: MLflow run {name!r} logged no metric values: nothing to import")
    keys, values, times, steps, nan = zip(*rows)
    steps = np.array(steps, dtype=np.int64)
    if steps.min() < 0 or steps.max() > MAX_STEP:
        raise GapwatchError(f"{path}: MLflow run {name!r} logged a step outside 0..{MAX_STEP}")
    names, codes = np.unique(np.array(keys, dtype=object), return_inverse=True)
    params = {key: setting(value) for key, value in mlflow_tables.params(path, run_id)}
    logged = replayed(trainer_names(list(names), params), codes, np.array(times, dtype=float), steps,
                      _values(values, nan))
    return ImportedRun(name_hint=name, scalars=logged.scalars(with_wall_time=True), events=logged.events,
                       source=str(path), config=params, notes=ended_notes(f"{path}: run {name!r}", status),
                       live=status == "RUNNING")


def _values(values, is_nan) -> np.ndarray:
    """The values as logged (module rules: MLflow's stand-ins for NaN and the infinities)."""
    out = np.array(values, dtype=float)
    out[np.array(is_nan, dtype=bool)] = np.nan
    out[out == sys.float_info.max] = np.inf
    out[out == -sys.float_info.max] = -np.inf
    return out


FORMAT = Format("mlflow-db", parse_mlflow_db, recognize, runs=database_runs)
