"""MLflow's database store as a SQLite file: what MLflow 3 tracks into unless told otherwise
(`mlflow.db` in the folder it started in; any `sqlite:///path` tracking URI), read without MLflow
and without writing to it.

Its tables are MLflow's own: `runs` (run_uuid, name, status as text, lifecycle_stage), `metrics`
(run_uuid, key, value, timestamp in ms, step, is_nan) and `params` (run_uuid, key, value).

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

import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import numpy as np

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .formats import Format, Probe, ReadOptions
from .imported_run import ImportedRun
from .input_checks import setting
from .mlflow_runs import ended_notes, replayed, trainer_names

_SQLITE_MAGIC = "SQLite format 3\x00"
# Columns only MLflow's tables have together (a gapwatch store is SQLite too).
_MLFLOW_COLUMNS = {"metrics": {"run_uuid", "is_nan", "step", "timestamp"}, "runs": {"run_uuid", "lifecycle_stage"}}


def _connect(path: Path) -> sqlite3.Connection:
    """The database, opened read-only: an import never changes the store MLflow is writing."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _is_mlflow(path: Path) -> bool:
    try:
        with closing(_connect(path)) as db:
            return all(cols <= {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                       for table, cols in _MLFLOW_COLUMNS.items())
    except sqlite3.Error:
        return False


def recognize(probe: Probe) -> bool:
    return not probe.is_dir and probe.head.startswith(_SQLITE_MAGIC) and _is_mlflow(probe.path)


def _runs(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(run id, name to pick it by) of every run not deleted: its name, or its id where another
    run has the same name, in the order they started."""
    rows = db.execute("SELECT r.run_uuid, COALESCE(NULLIF(r.name, ''), t.value, r.run_uuid) FROM runs r "
                      "LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'mlflow.runName' "
                      "WHERE r.lifecycle_stage != 'deleted' ORDER BY r.start_time, r.run_uuid").fetchall()
    names = [name for _, name in rows]
    return [(run_id, name if names.count(name) == 1 else run_id) for run_id, name in rows]


def database_runs(source: str | Path) -> list[str]:
    """The names the runs of a database are picked by (`_runs`)."""
    with closing(_connect(Path(source))) as db:
        return [name for _, name in _runs(db)]


def parse_mlflow_db(source: str | Path, options: ReadOptions = ReadOptions()) -> ImportedRun:
    """One run of an MLflow database (`options.source_run` names it where it holds several)."""
    path = Path(source)
    try:
        with closing(_connect(path)) as db:
            return _read_run(path, db, options.source_run)
    except sqlite3.Error as exc:
        raise GapwatchError(f"{path}: cannot read the MLflow database: {exc}") from None


def _read_run(path: Path, db: sqlite3.Connection, wanted: str | None) -> ImportedRun:
    runs = _runs(db)
    if wanted is not None:
        chosen = [(run_id, name) for run_id, name in runs if wanted in (name, run_id)]
        if not chosen:
            raise GapwatchError(f"{path}: no MLflow run {wanted!r} here (runs: {', '.join(n for _, n in runs)})")
    elif len(runs) > 1:
        listed = ", ".join(name for _, name in runs[:10]) + (" ..." if len(runs) > 10 else "")
        raise GapwatchError(f"{path}: {len(runs)} MLflow runs here ({listed}): import one with --run NAME, "
                            "or each with --all-runs")
    else:
        chosen = runs
    if not chosen:
        raise GapwatchError(f"{path}: the MLflow database holds no run")
    run_id, name = chosen[0]
    rows = db.execute("SELECT key, value, timestamp, step, is_nan FROM metrics WHERE run_uuid = ? ORDER BY rowid",
                      (run_id,)).fetchall()
    if not rows:
        raise GapwatchError(f"{path}: MLflow run {name!r} logged no metric values: nothing to import")
    keys, values, times, steps, nan = zip(*rows)
    steps = np.array(steps, dtype=np.int64)
    if steps.min() < 0 or steps.max() > MAX_STEP:
        raise GapwatchError(f"{path}: MLflow run {name!r} logged a step outside 0..{MAX_STEP}")
    names, codes = np.unique(np.array(keys, dtype=object), return_inverse=True)
    status, = db.execute("SELECT status FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
    params = {key: setting(value) for key, value in db.execute(
        "SELECT key, value FROM params WHERE run_uuid = ? ORDER BY key", (run_id,))}
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
