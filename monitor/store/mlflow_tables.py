"""MLflow's database store, read: the SQL gapwatch runs on a SQLite file MLflow tracked into
(`mlflow.db`), for `monitor.importers.mlflow_db`, which makes a run of what it returns. Only this
package speaks SQL, the queries on another tool's tables included.

MLflow's tables, the same since its 1.x releases: `runs` (run_uuid, name, status, start_time,
lifecycle_stage), `metrics` (run_uuid, key, value, timestamp in ms, step, is_nan), `params` and
`tags` (run_uuid, key, value). The file is opened read-only: an import never changes the database
MLflow is writing.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from monitor.errors import GapwatchError

# Columns only MLflow's tables have together (a gapwatch store is a SQLite file too).
_MLFLOW_COLUMNS = {"metrics": {"run_uuid", "is_nan", "step", "timestamp"}, "runs": {"run_uuid", "lifecycle_stage"}}


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)


def _query(path: Path, sql: str, args: tuple = ()) -> list[tuple]:
    try:
        with closing(_connect(path)) as db:
            return db.execute(sql, args).fetchall()
    except sqlite3.Error as exc:
        raise GapwatchError(f"{path}: cannot read the MLflow database: {exc}") from None


def is_mlflow_database(path: Path) -> bool:
    """Whether a SQLite file holds MLflow's tables."""
    try:
        with closing(_connect(path)) as db:
            return all(cols <= {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                       for table, cols in _MLFLOW_COLUMNS.items())
    except sqlite3.Error:
        return False


def runs(path: Path) -> list[tuple[str, str | None, str | None]]:
    """(run id, name, status) of every run not deleted, in the order they started; the name from
    the run or its `mlflow.runName` tag, None when it has neither."""
    return _query(path, "SELECT r.run_uuid, COALESCE(NULLIF(r.name, ''), t.value), r.status FROM runs r "
                        "LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'mlflow.runName' "
                        "WHERE r.lifecycle_stage != 'deleted' ORDER BY r.start_time, r.run_uuid")


def metrics(path: Path, run_id: str) -> list[tuple[str, float, int, int, int]]:
    """(key, value, timestamp ms, step, is_nan) of every value one run logged, in the order they
    were written."""
    return _query(path, "SELECT key, value, timestamp, step, is_nan FROM metrics WHERE run_uuid = ? ORDER BY rowid",
                  (run_id,))


def params(path: Path, run_id: str) -> list[tuple[str, str]]:
    """(key, value) of one run's params."""
    return _query(path, "SELECT key, value FROM params WHERE run_uuid = ? ORDER BY key", (run_id,))
