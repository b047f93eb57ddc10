"""Series derived by detectors (spike scores), kept apart from the logged rows (tables.derived_points).

They are small (a point where a score changes), so they are written with one upsert and read whole
per key, then thinned to the point budget keeping each bucket's highest value: a spike score's
peak is what a chart of it must show.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import Connection, and_, delete, select

from monitor.schema import MAX_STEP
from monitor.store import metric_rows, tables
from monitor.store.database import fetch_columns

DERIVED_PREFIX = "detect/"
"""Keys that name a derived series (monitor.schema: detect/spike_score/...)."""

_d = tables.derived_points.c


def write(db, conn: Connection, run_id: int, frame: pd.DataFrame, key_ids: dict[str, int]) -> int:
    """Upsert rows (step, key, value) of one run; NaN is stored as NULL, as for logged rows."""
    values = frame["value"].to_numpy(dtype=float)
    rows = [{"run_id": run_id, "key_id": key_ids[k], "step": int(s), "value": None if v != v else float(v)}
            for k, s, v in zip(frame["key"].tolist(), frame["step"].tolist(), values.tolist())]
    if rows:
        db.upsert(conn, tables.derived_points, rows, index=["run_id", "key_id", "step"], update=["value"])
    return len(rows)


def key_ids(conn: Connection, run_id: int) -> list[int]:
    return [k for (k,) in conn.execute(select(_d.key_id).distinct().where(_d.run_id == run_id))]


def read(conn: Connection, run_id: int, key_names: dict[int, str], step_range: tuple[int, int] | None,
         max_points: int) -> pd.DataFrame:
    """Long frame (key, step, value), at most `max_points` rows per key, in one query."""
    if not key_names:
        return pd.DataFrame({"key": pd.Series(dtype=object), "step": pd.Series(dtype=np.int64),
                             "value": pd.Series(dtype=float)})
    lo, hi = step_range if step_range is not None else (0, MAX_STEP)
    ids = list(key_names)
    keys, steps, values = fetch_columns(
        conn, f"SELECT key_id, step, value FROM {tables.derived_points.name} WHERE run_id = ? "
              f"AND key_id IN ({', '.join('?' * len(ids))}) AND step >= ? AND step <= ? ORDER BY key_id, step",
        (run_id, *ids, lo, hi), [np.int64, np.int64, float], order=2)
    parts = []
    for key_id, a, b in zip(ids, np.searchsorted(keys, ids, "left"), np.searchsorted(keys, ids, "right")):
        kept_steps, kept_values = _thin(steps[a:b], values[a:b], max_points)
        parts.append(pd.DataFrame({"key": key_names[key_id], "step": kept_steps, "value": kept_values}))
    return pd.concat(parts, ignore_index=True)


def _thin(steps: np.ndarray, values: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The highest value of each of at most `max_points` equal buckets of rows."""
    if len(steps) <= max_points:
        return steps, values
    bucket = np.arange(len(steps)) * max_points // len(steps)
    ranked = np.where(np.isnan(values), -np.inf, values)
    order = np.lexsort((-ranked, bucket))
    first = np.r_[True, bucket[order][1:] != bucket[order][:-1]]
    keep = np.sort(order[first])
    return steps[keep], values[keep]


def delete_run(conn: Connection, run_id: int) -> None:
    conn.execute(delete(tables.derived_points).where(_d.run_id == run_id))


def move_logged(conn: Connection) -> None:
    """Move derived series an older gapwatch stored among the logged rows into their own table."""
    k, s = tables.metric_keys.c, tables.series.c
    found = conn.execute(select(s.run_id, s.key_id).join(tables.metric_keys, k.id == s.key_id)
                         .where(k.name.like(DERIVED_PREFIX + "%"))).all()
    for run_id, key_id in found:
        steps, values = metric_rows.series_rows(conn, run_id, key_id).latest()
        rows = [{"run_id": run_id, "key_id": key_id, "step": int(st), "value": None if v != v else float(v)}
                for st, v in zip(steps.tolist(), values.tolist())]
        if rows:
            conn.execute(tables.derived_points.insert(), rows)
        for table in (tables.metrics, tables.metric_chunks, tables.rollups, tables.series):
            conn.execute(delete(table).where(and_(table.c.run_id == run_id, table.c.key_id == key_id)))
