"""The one read interface for everything that displays, and full-resolution loads for detection.

`read_scalars` never returns more than `max_points` rows per (run, key): it reads raw rows when a
range is small, the finest rollup level that fits otherwise, and thins what it read to the budget
with tsdownsample's MinMax, which keeps every bucket's extremes, so spikes (and the
global minimum and maximum) survive. It takes any budget of at least one point and any series
(empty, NaN-only, one point, huge gaps): MinMax is only handed what it can take (finite values on
strictly increasing steps, at least four points out, an even count), and a budget too small for
it keeps the extremes by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import and_, case, func, select, union_all
from tsdownsample import MinMaxDownsampler

from monitor.errors import GapwatchError
from monitor.schema import (
    CONFIG_GLOBAL_BATCH_SIZE,
    CONFIG_RECORDS_PER_EPOCH,
    CONFIG_TOKENS_PER_STEP,
    MAX_STEP,
    UNKNOWN_WALL_TIME,
    Detection,
    RunData,
    RunInfo,
    SeriesMark,
    Severity,
    empty_events,
    empty_long,
)
from monitor.store import metric_rows, tables
from monitor.store.database import Database, fetch_columns
from monitor.store.rollups import LEVEL_WIDTHS, choose_level
from monitor.store.run_frames import stream_run_data

DEFAULT_MAX_POINTS = 2000
# Read up to this many times the budget (raw rows, or rollup points) before thinning in memory:
# enough for the in-memory thinning to choose well, still O(points shown).
OVERSAMPLE = 4
# Raw rows are read for ranges up to this many times the budget (a 2,000-point chart: 32k rows,
# tens of milliseconds), so mid-sized ranges are thinned from every point, not from 64-step buckets.
RAW_READ_FACTOR = 16
_SCALAR_COLUMNS = ["run", "key", "step", "value"]
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def _as_list(x) -> list[str]:
    return [x] if isinstance(x, str) else list(x)


@dataclass(frozen=True)
class ChartRead:
    """What a point-budgeted read gives a chart: the rows, and how coarse each series came back."""

    rows: pd.DataFrame
    """Long frame (run, key, step, value)."""
    bucket_width: Mapping[tuple[str, str], int]
    """Steps one returned point stands for, per (run, key): 1 at full resolution. A downsampled
    series (width > 1) holds only finite values and ends at the range's last finite value."""


def read_scalars(db: Database, runs, keys, step_range=None, max_points: int = DEFAULT_MAX_POINTS,
                 since_step: int | None = None) -> pd.DataFrame:
    """The rows of `read_series`, for callers that need no bucket widths."""
    return read_series(db, runs, keys, step_range, max_points, since_step).rows


def read_series(db: Database, runs, keys, step_range=None, max_points: int = DEFAULT_MAX_POINTS,
                since_step: int | None = None) -> ChartRead:
    """The latest attempt of each step, at most `max_points` rows per series, with each series'
    bucket width. Unknown keys give no rows; an unknown run is an error. At full resolution NaN
    and Inf come back as logged."""
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    parts = []
    widths: dict[tuple[str, str], int] = {}
    with db.read() as conn:
        for run in _as_list(runs):
            run_id = db.run_id(conn, run)
            key_ids = db.key_ids(conn, _as_list(keys))
            if not key_ids:
                continue
            s = tables.series.c
            marks = {
                k: (first, last, n)
                for k, first, last, n in conn.execute(
                    select(s.key_id, s.first_step, s.last_step, s.n).where(
                        and_(s.run_id == run_id, s.key_id.in_(list(key_ids.values())))
                    )
                )
            }
            plans = []  # (key, key_id, lo, hi, level, maybe sparse)
            for key, key_id in key_ids.items():
                if key_id not in marks:
                    continue
                first, last, n = marks[key_id]
                lo, hi = first, last
                if step_range is not None:
                    lo = max(lo, int(step_range[0]) if step_range[0] is not None else lo)
                    hi = min(hi, int(step_range[1]) if step_range[1] is not None else hi)
                if since_step is not None:
                    lo = max(lo, int(since_step) + 1)
                if lo > hi:
                    continue
                density = n / max(1, last - first + 1)
                level = choose_level(hi - lo + 1, density, max_points, OVERSAMPLE, RAW_READ_FACTOR)
                plans.append((key, key_id, lo, hi, level, level is None and n * LEVEL_WIDTHS[0] <= hi - lo + 1))
            sparse = _sparse_from_rollups(conn, run_id, {key_id: (lo, hi) for _, key_id, lo, hi, _, maybe in plans
                                                         if maybe})
            for key, key_id, lo, hi, level, _ in plans:
                if level is None:
                    exact = sparse.get(key_id)
                    steps, values = exact or metric_rows.series_rows(conn, run_id, key_id, lo, hi).latest()
                    width = 1
                    tail = _last_finite(steps, values)
                else:
                    steps, values = _from_rollups(conn, run_id, key_id, level, lo, hi)
                    width = LEVEL_WIDTHS[level]
                    tail = _last_finite(*metric_rows.latest_tail(conn, run_id, key_id, lo, hi))
                if width > 1 or len(steps) > max_points:
                    steps, values = _thin(steps, values, max_points, tail)
                    width = max(width, 2)
                widths[(run, key)] = width
                parts.append((run, key, steps, values))
    out = _long_frame(parts) if parts else empty_long("run", "key", "step", "value")
    return ChartRead(out[_SCALAR_COLUMNS], widths)


def read_bucket_means(db: Database, run: str, key: str, step_range=None) -> pd.DataFrame:
    """(step, value): the mean of the finite values of each finest rollup bucket of one series in
    the range (edge buckets whole), halfway between the bucket's first step and its last logged
    one. Unknown keys give no rows; an unknown run is an error."""
    width = LEVEL_WIDTHS[0]
    lo, hi = step_range if step_range is not None else (0, MAX_STEP)
    with db.read() as conn:
        run_id = db.run_id(conn, run)
        key_id = db.key_ids(conn, [key]).get(key)
        bucket, finite, total, last = [np.empty(0)] * 4 if key_id is None else fetch_columns(
            conn, _MEANS_QUERY, (run_id, key_id, lo // width, hi // width), [float] * 4, order=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / finite
    keep = finite > 0
    start = bucket * width
    steps = ((start + np.minimum(start + width - 1, last)) // 2)[keep]
    return pd.DataFrame({"step": steps.astype(np.int64), "value": mean[keep]})


def _long_frame(parts: list[tuple[str, str, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """One long frame of (run, key, steps, values) parts, built once: a frame per series costs
    more than its rows when a page reads a hundred of them."""
    sizes = [len(p[2]) for p in parts]
    return pd.DataFrame({
        "run": np.repeat(np.array([p[0] for p in parts], dtype=object), sizes),
        "key": np.repeat(np.array([p[1] for p in parts], dtype=object), sizes),
        "step": np.concatenate([np.asarray(p[2], dtype=np.int64) for p in parts]),
        "value": np.concatenate([np.asarray(p[3], dtype=float) for p in parts]),
    }).astype({"run": str, "key": str})


def _thin(steps: np.ndarray, values: np.ndarray, max_points: int, tail: tuple[int, float] | None):
    """At most `max_points` finite points: MinMax buckets of everything before the range's last
    finite point, then that point. Ending where the data ends keeps a chart's right edge honest,
    and lets live polling read only what comes after it."""
    keep = np.isfinite(values)
    if tail is not None:
        keep &= steps < tail[0]
    steps, values = steps[keep], values[keep]
    room = max_points - (tail is not None)
    if len(steps) > room:
        idx = _budget_indices(steps, values, room)
        steps, values = steps[idx], values[idx]
    if tail is not None:
        steps, values = np.append(steps, tail[0]), np.append(values, tail[1])
    return steps, values


# tsdownsample's MinMax needs two buckets at least (it panics, a BaseException, below that) and
# an even number of points out.
MINMAX_MIN_POINTS = 4


def _budget_indices(steps: np.ndarray, values: np.ndarray, room: int) -> np.ndarray:
    """Positions of at most `room` points of finite `values` at sorted distinct `steps`, keeping
    the extremes: MinMax buckets when the budget allows them, else the global minimum and
    maximum (as many of them as fit)."""
    if room < MINMAX_MIN_POINTS:
        extremes = np.unique([int(np.argmin(values)), int(np.argmax(values))]) if room > 0 else []
        return np.asarray(extremes, dtype=np.int64)[:room]
    # Buckets of equal counts (positions as x), not of equal step spans: tsdownsample's binning of
    # a step axis with huge gaps can leave a point in no bucket and lose a series' maximum (the
    # reader's property test found one). The extremes of every bucket are kept either way.
    idx = MinMaxDownsampler().downsample(np.arange(len(steps)), values, n_out=room - room % 2)
    # A bucket of one point gives it as its minimum and its maximum.
    return np.unique(idx)


def _last_finite(steps: np.ndarray, values: np.ndarray) -> tuple[int, float] | None:
    finite = np.flatnonzero(np.isfinite(values))
    return (int(steps[finite[-1]]), float(values[finite[-1]])) if len(finite) else None


# Rollup reads go through database.fetch_columns: a run page reads a couple of hundred series this
# way, and SQLAlchemy's handling of a statement and its rows cost several times the query itself.
_SPARSE_ROLLUPS_QUERY = ("SELECT key_id, bucket, n, nonfinite, min_step, min_value, max_step, max_value "
                         f"FROM {tables.rollups.name} WHERE run_id = ? AND key_id IN ({{marks}}) AND level = 0 "
                         "AND bucket >= ? AND bucket <= ?")
_MEANS_QUERY = (f"SELECT bucket, n - nonfinite, total, last_step FROM {tables.rollups.name} "
                "WHERE run_id = ? AND key_id = ? AND level = 0 AND bucket >= ? AND bucket <= ? ORDER BY bucket")
_ROLLUPS_QUERY = (f"SELECT min_step, min_value, max_step, max_value FROM {tables.rollups.name} "
                  "WHERE run_id = ? AND key_id = ? AND level = ? AND bucket >= ? AND bucket <= ? ORDER BY bucket")


def _sparse_from_rollups(conn, run_id: int, ranges: dict[int, tuple[int, int]]) -> dict[int, tuple | None]:
    """{key id: every logged point (steps, values) of a sparse series (evals every few thousand
    steps) in its range (lo, hi), from its finest rollups, when they hold them all; None
    otherwise}: each bucket has one point, or two at different steps (its minimum and its
    maximum), and no NaN/Inf (rollups keep finite values only). A raw read decodes every chunk the
    range spans, for a handful of rows each. One query for all the series."""
    if not ranges:
        return {}
    width = LEVEL_WIDTHS[0]
    ids = sorted(ranges)
    keys, buckets, n, nonfinite, min_step, min_value, max_step, max_value = fetch_columns(
        conn, _SPARSE_ROLLUPS_QUERY.format(marks=", ".join("?" * len(ids))),
        (run_id, *ids, min(lo for lo, _ in ranges.values()) // width, max(hi for _, hi in ranges.values()) // width),
        [np.int64] * 4 + [float] * 4, order=2)
    out = {}
    for key_id, a, b in zip(ids, np.searchsorted(keys, ids, "left"), np.searchsorted(keys, ids, "right")):
        lo, hi = ranges[key_id]
        a, b = a + np.searchsorted(buckets[a:b], lo // width, "left"), a + np.searchsorted(buckets[a:b], hi // width, "right")
        out[key_id] = _sparse_points(n[a:b], nonfinite[a:b], min_step[a:b], min_value[a:b], max_step[a:b],
                                     max_value[a:b], lo, hi)
    return out


def _sparse_points(n, nonfinite, min_step, min_value, max_step, max_value, lo: int, hi: int):
    """One series' points from its finest rollup rows (_sparse_from_rollups), or None."""
    if not len(n):
        return np.empty(0, np.int64), np.empty(0, float)
    if nonfinite.any() or n.max() > 2:
        return None  # (a bucket of NaN only has no minimum step either)
    min_step, max_step = min_step.astype(np.int64), max_step.astype(np.int64)
    if ((n == 2) & (min_step == max_step)).any():
        return None
    two = n == 2
    steps = np.concatenate([min_step, max_step[two]])
    values = np.concatenate([min_value, max_value[two]])
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    inside = (steps >= lo) & (steps <= hi)
    return steps[inside], values[inside]


def _from_rollups(conn, run_id: int, key_id: int, level: int, lo: int, hi: int):
    width = LEVEL_WIDTHS[level]
    min_step, min_value, max_step, max_value = fetch_columns(
        conn, _ROLLUPS_QUERY, (run_id, key_id, level, lo // width, hi // width), [float] * 4)
    # A bucket of NaN only has no extremes (NULL): its step -1 lies before every range.
    steps = np.nan_to_num(np.concatenate([min_step, max_step]), nan=-1).astype(np.int64)
    values = np.concatenate([min_value, max_value])
    # Edge buckets reach past the range: keep only their extremes that fall inside it. A bucket
    # of one point gives it as its minimum and its maximum: each step is kept once.
    inside = (steps >= lo) & (steps <= hi)
    steps, at = np.unique(steps[inside], return_index=True)
    return steps, values[inside][at]


def list_runs(db: Database) -> pd.DataFrame:
    r, s, a = tables.runs.c, tables.series.c, tables.alerts.c
    last = (
        select(s.run_id, func.max(s.last_step).label("last_step"), func.max(s.last_wall_time).label("last_wall_time"))
        .group_by(s.run_id)
        .subquery()
    )
    rank = case(SEVERITY_RANK, value=a.severity, else_=0)
    open_alerts = (
        select(a.run_id, func.count().label("open_alerts"), func.max(rank).label("worst_rank"))
        .where(a.state == "open").group_by(a.run_id).subquery()
    )
    # The worst severity ever found, by the watch service (alerts in any state) or by `detect`
    # (stored detections): a run whose incidents have resolved still shows that it had them.
    d = tables.detections.c
    found = union_all(
        select(a.run_id.label("run_id"), rank.label("rank")),
        select(d.run_id.label("run_id"), case(SEVERITY_RANK, value=d.severity, else_=0).label("rank")),
    ).subquery()
    ever = select(found.c.run_id, func.max(found.c.rank).label("ever_rank")).group_by(found.c.run_id).subquery()
    query = (
        select(r.name, r.project, r.source, r.status, r.reference, r.tokens_per_step, r.attempts,
               r.created_at, r.updated_at, last.c.last_step, last.c.last_wall_time,
               func.coalesce(open_alerts.c.open_alerts, 0).label("open_alerts"), open_alerts.c.worst_rank,
               ever.c.ever_rank)
        .select_from(tables.runs)
        .outerjoin(last, last.c.run_id == tables.runs.c.id)
        .outerjoin(open_alerts, open_alerts.c.run_id == tables.runs.c.id)
        .outerjoin(ever, ever.c.run_id == tables.runs.c.id)
        .order_by(tables.runs.c.updated_at.desc())
    )
    with db.read() as conn:
        frame = pd.DataFrame(conn.execute(query).mappings().all(), columns=[
            "name", "project", "source", "status", "reference", "tokens_per_step", "attempts", "created_at",
            "updated_at", "last_step", "last_wall_time", "open_alerts", "worst_rank", "ever_rank"])
    # A run whose source logged no times has none to show (see UNKNOWN_WALL_TIME).
    frame["last_wall_time"] = frame["last_wall_time"].astype(float).where(frame["last_wall_time"] > UNKNOWN_WALL_TIME)
    names = {rank: name for name, rank in SEVERITY_RANK.items()}
    frame["worst_open_severity"] = [names.get(int(r)) if pd.notna(r) else None for r in frame.pop("worst_rank")]
    frame["worst_severity"] = [names.get(int(r)) if pd.notna(r) else None for r in frame.pop("ever_rank")]
    return frame


def series_marks(db: Database, name: str) -> dict[str, SeriesMark]:
    """Each of a run's series' marks (kept with every write: no scan)."""
    s = tables.series.c
    with db.read() as conn:
        run_id = db.run_id(conn, name)
        rows = conn.execute(select(s.key_id, s.first_step, s.last_step, s.n).where(s.run_id == run_id)).all()
        names = db.key_names(conn, [r[0] for r in rows])
    return {names[k]: SeriesMark(int(first), int(last), int(n)) for k, first, last, n in rows}


ALERT_COLUMNS = ["id", "attempt", "detector", "metric", "state", "severity", "start_step", "end_step",
                 "peak_step", "score", "message", "opened_at", "updated_at", "resolved_at"]


def read_alerts(db: Database, name: str, limit: int = 500) -> pd.DataFrame:
    """A run's alerts (incidents), most recently updated first, at most `limit`."""
    a = tables.alerts.c
    with db.read() as conn:
        run_id = db.run_id(conn, name)
        rows = conn.execute(
            select(*[getattr(a, c) for c in ALERT_COLUMNS]).where(a.run_id == run_id)
            .order_by(a.updated_at.desc(), a.id.desc()).limit(limit)
        ).all()
    frame = pd.DataFrame(rows, columns=ALERT_COLUMNS)
    for col in ("start_step", "end_step", "peak_step"):
        frame[col] = frame[col].astype("int64")
    return frame


def activity(db: Database, name: str) -> list[list]:
    """Counts and latest changes of a run's events, detections and alerts: a cheap fingerprint that
    changes whenever any of them does (one aggregate query per table)."""
    e, d, a = tables.events.c, tables.detections.c, tables.alerts.c
    with db.read() as conn:
        run_id = db.run_id(conn, name)
        return [
            list(conn.execute(select(func.count(), func.max(e.id)).where(e.run_id == run_id)).one()),
            list(conn.execute(select(func.count(), func.max(d.updated_at)).where(d.run_id == run_id)).one()),
            list(conn.execute(select(func.count(), func.max(a.updated_at)).where(a.run_id == run_id)).one()),
        ]


def read_events(db: Database, name: str, kinds: Iterable[str] | None = None) -> pd.DataFrame:
    e = tables.events.c
    with db.read() as conn:
        cond = e.run_id == db.run_id(conn, name)
        if kinds is not None:
            cond = and_(cond, e.kind.in_([k.value if hasattr(k, "value") else k for k in kinds]))
        rows = conn.execute(
            select(e.step, e.kind, e.attempt, e.payload, e.wall_time).where(cond).order_by(e.step, e.wall_time, e.id)
        ).all()
    if not rows:
        out = empty_events()
        out["wall_time"] = pd.Series(dtype=float)
        return out
    frame = pd.DataFrame(rows, columns=["step", "kind", "attempt", "payload", "wall_time"])
    frame["payload"] = frame["payload"].map(json.loads)
    frame["step"] = frame["step"].astype("int64")
    frame["attempt"] = frame["attempt"].astype("int64")
    return frame


def get_run(db: Database, name: str) -> dict | None:
    """The run's row, its config parsed; None if there is no such run."""
    with db.read() as conn:
        row = conn.execute(select(tables.runs).where(tables.runs.c.name == name)).mappings().first()
    if row is None:
        return None
    out = dict(row)
    out["config"] = json.loads(out["config"])
    return out


def run_info(db: Database, name: str) -> RunInfo:
    run = get_run(db, name)
    if run is None:
        raise GapwatchError(f"no run named {name!r} in {db.url.redacted()}")
    return _info(name, run)


def run_infos(db: Database, names: Iterable[str]) -> dict[str, RunInfo]:
    """The RunInfo of several runs in one query (the runs the store does not know are left out)."""
    with db.read() as conn:
        rows = conn.execute(select(tables.runs).where(tables.runs.c.name.in_(list(names)))).mappings().all()
    return {row["name"]: _info(row["name"], {**row, "config": json.loads(row["config"])}) for row in rows}


def _info(name: str, run: dict) -> RunInfo:
    config = run["config"]
    tokens = run["tokens_per_step"] or config.get(CONFIG_TOKENS_PER_STEP)
    batch = config.get(CONFIG_GLOBAL_BATCH_SIZE)
    records = config.get(CONFIG_RECORDS_PER_EPOCH)
    return RunInfo(
        name=name,
        tokens_per_step=float(tokens) if tokens else None,
        global_batch_size=int(batch) if batch else None,
        records_per_epoch=int(records) if records else None,
        reference=run["reference"],
        config=config,
    )


def load_run(db: Database, name: str, keys: Iterable[str] | None = None) -> RunData:
    """Every logged value of a run at full resolution, split as RunData describes. The run's steps
    are read first (two bytes a step), then each series a chunk at a time straight into the
    frame, so memory holds the frame and one chunk's rows, not every row of the run."""
    info = run_info(db, name)
    events = read_events(db, name).drop(columns=["wall_time"])
    with db.read() as conn:
        run_id = db.run_id(conn, name)
        s = tables.series.c
        counts = dict(conn.execute(select(s.key_id, s.n).where(s.run_id == run_id)).all())
        stored = list(counts)
        if keys is not None:
            wanted = set(db.key_ids(conn, _as_list(keys)).values())
            stored = [k for k in stored if k in wanted]
        names = db.key_names(conn, stored)
        key_ids = {names[k]: k for k in stored}
        steps = metric_rows.logged_steps(conn, run_id, stored)
        return stream_run_data(info, steps, list(key_ids),
                               lambda key: metric_rows.series_parts(conn, run_id, key_ids[key]), events,
                               counts={name: int(counts[k]) for name, k in key_ids.items()})


def read_detections(db: Database, run: str | None = None, detector: str | None = None) -> list[Detection]:
    d, r = tables.detections.c, tables.runs.c
    query = select(tables.detections, r.name.label("run_name")).join(tables.runs, r.id == d.run_id)
    if run is not None:
        query = query.where(r.name == run)
    if detector is not None:
        query = query.where(d.detector == detector)
    with db.read() as conn:
        if run is not None:
            db.run_id(conn, run)
        rows = conn.execute(query.order_by(d.start_step, d.id)).mappings().all()
    return [
        Detection(
            run=row["run_name"], detector=row["detector"], metric=row["metric"],
            start_step=int(row["start_step"]), end_step=int(row["end_step"]), peak_step=int(row["peak_step"]),
            score=row["score"], severity=Severity(row["severity"]), message=row["message"],
            evidence=json.loads(row["evidence"]), reference=row["reference"], attempt=row["attempt"],
            known_step=None if row["known_step"] is None else int(row["known_step"]),
        )
        for row in rows
    ]

