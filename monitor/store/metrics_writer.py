"""The write path for metric rows: bulk insert, series marks and incremental rollups, in one transaction.

Idempotence: a row is keyed by (run, key, step, attempt) and inserted with ON CONFLICT DO NOTHING,
so a replayed batch changes nothing. Rollups are merged incrementally only for rows past a series'
high-water mark (the common, append-only case). A batch that reaches back to or before the mark (a
replay, or a resumed run logging steps again) makes the writer rebuild the affected buckets from the
raw rows instead, which is exact and idempotent too.

Where rows go (see chunks.py): a row whose step lies in a sealed range (below the start of the
chunk that holds the series' last step, this batch included) is merged into its chunk; the rest go
to the row table. When a batch moves a series' last step into a later chunk, the tail rows of the
ranges it sealed move from the row table into chunks in the same transaction. A merge keeps the
stored row of a (step, attempt) over a new one, as ON CONFLICT DO NOTHING does in the row table.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Connection, and_, delete, func, select, text
from sqlalchemy.exc import IntegrityError

from monitor.store import chunks, metric_rows, tables, tail_cache
from monitor.store.chunks import ChunkRows
from monitor.store.database import insert_rows, sqlite_rows
from monitor.store.rollups import LEVEL_WIDTHS, aggregate, aggregate_levels

_SQLITE_INSERT = (
    "INSERT INTO metrics (run_id, key_id, step, attempt, value, wall_time) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)

# Rows given to one executemany or COPY.
_INSERT_SLICE_ROWS = 20_000

_ROLLUP_MERGE = """
    INSERT INTO rollups (run_id, key_id, level, bucket, n, nonfinite, total, min_step, min_value,
                         max_step, max_value, last_step, last_value)
    VALUES (:run_id, :key_id, :level, :bucket, :n, :nonfinite, :total, :min_step, :min_value,
            :max_step, :max_value, :last_step, :last_value)
    ON CONFLICT (run_id, key_id, level, bucket) DO UPDATE SET
        n = rollups.n + excluded.n,
        nonfinite = rollups.nonfinite + excluded.nonfinite,
        total = CASE WHEN rollups.total IS NULL THEN excluded.total
                     WHEN excluded.total IS NULL THEN rollups.total
                     ELSE rollups.total + excluded.total END,
        min_step = CASE WHEN rollups.min_value IS NULL OR excluded.min_value < rollups.min_value
                        THEN excluded.min_step ELSE rollups.min_step END,
        min_value = CASE WHEN rollups.min_value IS NULL OR excluded.min_value < rollups.min_value
                         THEN excluded.min_value ELSE rollups.min_value END,
        max_step = CASE WHEN rollups.max_value IS NULL OR excluded.max_value > rollups.max_value
                        THEN excluded.max_step ELSE rollups.max_step END,
        max_value = CASE WHEN rollups.max_value IS NULL OR excluded.max_value > rollups.max_value
                         THEN excluded.max_value ELSE rollups.max_value END,
        last_step = CASE WHEN excluded.last_step >= rollups.last_step
                         THEN excluded.last_step ELSE rollups.last_step END,
        last_value = CASE WHEN excluded.last_step >= rollups.last_step
                          THEN excluded.last_value ELSE rollups.last_value END
"""

_SERIES_MERGE = (
    """
    INSERT INTO series (run_id, key_id, first_step, last_step, n, last_wall_time)
    VALUES (:run_id, :key_id, :first_step, :last_step, :n, :last_wall_time)
    ON CONFLICT (run_id, key_id) DO UPDATE SET
        first_step = CASE WHEN excluded.first_step < series.first_step
                          THEN excluded.first_step ELSE series.first_step END,
        last_step = CASE WHEN excluded.last_step > series.last_step
                         THEN excluded.last_step ELSE series.last_step END,
        n = series.n + excluded.n,
        last_wall_time = CASE WHEN excluded.last_wall_time > series.last_wall_time
                              THEN excluded.last_wall_time ELSE series.last_wall_time END
    """
)


def _nothing() -> None:
    pass


def write(conn: Connection, run_id: int, batch: "Batch", progress: Callable[[], None] | None = None) -> int:
    """Insert the rows of one run (`Batch.of`: validated, integer steps >= 0); return how many,
    a repeated (key_id, step, attempt) counted once.

    `progress()` is called each time the database has answered a part of the write (a phase, a
    slice of the insert): a caller that bounds a write by the database's silence can tell a
    large write that is moving from one that gets no answer.
    """
    if not len(batch.steps):
        return 0
    progress = progress or _nothing

    distinct = _distinct_sorted(batch.key_ids)
    marks = _lock_marks(conn, run_id, distinct.tolist())
    progress()
    # Per row through the distinct keys (searchsorted), not a dict lookup per row: see
    # bench/RESULTS.md, design measurements.
    mark = np.array([marks.get(k, -1) for k in distinct.tolist()], dtype=np.int64)[
        np.searchsorted(distinct, batch.key_ids)]
    appends = batch.steps > mark
    in_tail = _seal(conn, run_id, batch, marks)
    progress()
    if in_tail.any():
        _insert_raw(conn, run_id, batch.select(in_tail), only_appends=bool(appends[in_tail].all()),
                    progress=progress)

    if appends.any():
        fresh = batch.select(appends).latest_per_step()
        _merge_rollups(conn, run_id, fresh)
        progress()
        _merge_series(conn, run_id, fresh)
        progress()
    # A key whose batch reaches back to or before its mark is rebuilt from the raw rows.
    back_keys = batch.key_ids[~appends]
    for key_id in np.unique(back_keys).tolist():
        _rebuild_tail(conn, run_id, key_id, int(batch.steps[~appends][back_keys == key_id].min()))
    return len(batch.steps)


@dataclass
class Batch:
    """Rows of one write as parallel arrays, sorted by (key_id, step, attempt)."""

    key_ids: np.ndarray
    steps: np.ndarray
    attempts: np.ndarray
    values: np.ndarray
    wall_times: np.ndarray

    @classmethod
    def of(cls, key_ids: np.ndarray, steps: np.ndarray, attempts: np.ndarray, values: np.ndarray,
           wall_times: np.ndarray) -> "Batch":
        """Rows given in any order, sorted; a (key_id, step, attempt) given more than once keeps
        the last row given."""
        order = np.lexsort((attempts, steps, key_ids))  # stable: repeats stay in the order given
        return cls(key_ids[order], steps[order], attempts[order], values[order],
                   wall_times[order]).last_of_repeats()

    def select(self, mask: np.ndarray) -> "Batch":
        """The rows where boolean `mask` is set."""
        if mask.all():
            return self  # an import's batch is all appends: no copy of it
        return Batch(self.key_ids[mask], self.steps[mask], self.attempts[mask], self.values[mask],
                     self.wall_times[mask])

    def part(self, lo: int, hi: int) -> "Batch":
        """Rows lo..hi-1, as views of this batch's arrays."""
        return Batch(self.key_ids[lo:hi], self.steps[lo:hi], self.attempts[lo:hi], self.values[lo:hi],
                     self.wall_times[lo:hi])

    def last_of_repeats(self) -> "Batch":
        """One row per (key, step, attempt): the last given of each run of equal triples."""
        last = np.ones(len(self.steps), dtype=bool)
        last[:-1] = ((self.key_ids[1:] != self.key_ids[:-1]) | (self.steps[1:] != self.steps[:-1])
                     | (self.attempts[1:] != self.attempts[:-1]))
        return self.select(last)

    def latest_per_step(self) -> "Batch":
        """The highest attempt of each (key, step): the last row of each run of equal pairs."""
        last = np.ones(len(self.steps), dtype=bool)
        last[:-1] = (self.key_ids[1:] != self.key_ids[:-1]) | (self.steps[1:] != self.steps[:-1])
        return self.select(last)


def _seal(conn: Connection, run_id: int, batch: Batch, marks: dict[int, int]) -> np.ndarray:
    """Merge the batch's rows in sealed ranges into their chunks and seal the ranges this batch
    closes; return the mask of the rows that belong in the row table."""
    width = chunks.width(conn)
    in_tail = np.ones(len(batch.steps), dtype=bool)
    starts = np.flatnonzero(np.r_[True, batch.key_ids[1:] != batch.key_ids[:-1]])
    ends = np.r_[starts[1:], len(batch.steps)]
    plans = []
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        key_id = int(batch.key_ids[lo])
        old_mark = marks.get(key_id, -1)
        boundary = sealed_below(max(old_mark, int(batch.steps[hi - 1])), width)
        # A series' rows are sorted by step: those in sealed ranges come first.
        sealed = lo + int(np.searchsorted(batch.steps[lo:hi], boundary))
        # The chunk that held the old tail, if it had one and this batch moves the tail past it.
        old_boundary = sealed_below(old_mark, width)
        closing = old_mark // width if old_boundary <= old_mark < boundary else None
        if sealed == lo and closing is None:
            continue
        in_tail[lo:sealed] = False
        plans.append(_SealPlan(key_id, batch.part(lo, sealed), closing, old_boundary // width - 1))
    _merge_chunks(conn, run_id, plans)
    return in_tail


def seal_all(conn: Connection) -> None:
    """Move every row of a sealed range from the row table into chunks (a store written before
    chunks existed, or before a chunk was sealed at its own last step): afterwards each series'
    rows below its `sealed_below` are chunked."""
    width = chunks.width(conn)
    s, m = tables.series.c, tables.metrics.c
    for run_id, key_id, last_step in conn.execute(select(s.run_id, s.key_id, s.last_step)).all():
        boundary = sealed_below(int(last_step), width)
        rows = metric_rows.tail_rows(conn, run_id, key_id, 0, boundary - 1)
        if not len(rows):
            continue
        conn.execute(delete(tables.metrics).where(and_(m.run_id == run_id, m.key_id == key_id, m.step < boundary)))
        moved = Batch(np.full(len(rows), key_id, dtype=np.int64), rows.steps, rows.attempts, rows.values,
                      rows.wall_times)
        _merge_chunks(conn, run_id, [_SealPlan(key_id, moved, None)])


@dataclass
class _SealPlan:
    """One series' part of a seal: its rows that fall in sealed ranges, and the chunk whose rows
    move from the row table, if the write closes one."""

    key_id: int
    new: Batch
    closing: int | None
    last_stored: int | None = None
    """The series' highest chunk that may be stored already (the last one below its
    `sealed_below`), None when any may be."""


def _merge_chunks(conn: Connection, run_id: int, plans: list[_SealPlan]) -> None:
    """Write every chunk that the plans' rows fall in, and chunk each closing range from the row
    table's rows. A few statements for the whole write, whatever its number of series: per
    series, the four statements of reading, deleting and writing took most of a wide import."""
    if not plans:
        return
    width = chunks.width(conn)
    targets = {p.key_id: set(_distinct_sorted(p.new.steps // width).tolist())
               | ({p.closing} if p.closing is not None else set()) for p in plans}
    # Only chunks below the one of a series' last step can be stored already: a write that only
    # appends (an import, a live run) reads none.
    may_exist = {p.key_id: {c for c in targets[p.key_id] if p.last_stored is None or c <= p.last_stored}
                 for p in plans}
    wanted = set().union(*may_exist.values())
    stored = {} if not wanted else {
        (k, c): rows for k, c, rows in chunks.read(conn, run_id, [k for k in may_exist if may_exist[k]],
                                                   chunks=wanted, with_wall_times=True)
        if c in may_exist[k]}
    replaced = list(stored)
    by_range: dict[int, list[int]] = {}
    for p in plans:
        if p.closing is not None:
            by_range.setdefault(p.closing, []).append(p.key_id)
    m = tables.metrics.c
    for closing, key_ids in by_range.items():
        lo, hi = closing * width, (closing + 1) * width - 1
        remembered = tail_cache.take_many(conn, run_id, key_ids, lo, hi)
        emptied = []
        for key_id in key_ids:
            moved = remembered.get(key_id)
            if moved is None:
                moved = metric_rows.tail_rows(conn, run_id, key_id, lo, hi)
            if len(moved):
                have = stored.get((key_id, closing))
                stored[(key_id, closing)] = moved if have is None else chunks.merge_first_wins([have, moved])
                emptied.append(key_id)
        if emptied:
            conn.execute(delete(tables.metrics).where(and_(
                m.run_id == run_id, m.key_id.in_(emptied), m.step >= lo, m.step <= hi)))
    written = []
    for p in plans:
        for chunk in sorted(targets[p.key_id]):
            a, b = np.searchsorted(p.new.steps, [chunk * width, (chunk + 1) * width])  # sorted
            fresh = ChunkRows(p.new.steps[a:b], p.new.attempts[a:b], p.new.values[a:b], p.new.wall_times[a:b])
            have = stored.get((p.key_id, chunk))
            merged = chunks.merge_first_wins([have, fresh] if have is not None else [fresh])
            if len(merged):
                written.append((p.key_id, chunk, merged))
    chunks.write_many(conn, run_id, written, replacing=replaced)


def sealed_below(last_step: int, width: int) -> int:
    """The step below which a series whose last step is `last_step` keeps its rows in chunks:
    every chunk up to the one that holds `last_step`, and that one too once `last_step` is its
    own last step (no later step can fall in it; an earlier one merges into it)."""
    return width * ((last_step + 1) // width)


def _distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array (np.unique would sort it again)."""
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def _lock_marks(conn: Connection, run_id: int, key_ids: list[int]) -> dict[int, int]:
    """Last step written per key. On PostgreSQL two hosts writing the same series take turns for
    the rest of the transaction (deciding append versus rebuild, sealing chunks): each key's
    transaction lock is taken in key order, so that writers of overlapping keys never deadlock. A lock on
    the series' own row would not do: a series written for the first time has none yet, and two
    hosts would both seal its first chunk. SQLite has one writer at a time already."""
    query = select(tables.series.c.key_id, tables.series.c.last_step).where(
        and_(tables.series.c.run_id == run_id, tables.series.c.key_id.in_(key_ids))
    )
    if conn.dialect.name == "postgresql":
        conn.execute(text(
            "SELECT count(pg_advisory_xact_lock(:run_id, k)) "
            "FROM (SELECT k FROM unnest(CAST(:key_ids AS integer[])) AS k ORDER BY k) AS ordered"
        ), {"run_id": run_id, "key_ids": sorted(key_ids)})
        query = query.with_for_update()
    return {int(k): int(s) for k, s in conn.execute(query)}


def _insert_raw(conn: Connection, run_id: int, batch: Batch, only_appends: bool,
                progress: Callable[[], None] = _nothing) -> None:
    complete = True
    # In slices: a row as a tuple of Python objects takes ~200 bytes, so a whole batch of them
    # was the largest thing an import held.
    for lo in range(0, len(batch.steps), _INSERT_SLICE_ROWS):
        part = batch.part(lo, lo + _INSERT_SLICE_ROWS)
        if conn.dialect.name == "postgresql":
            complete &= _copy_postgres(conn, _binary_copy(run_id, part), len(part.steps), only_appends)
        else:
            complete &= _insert_sqlite(conn, run_id, part)
        progress()
    _remember_tail(conn, run_id, batch, complete)


def _insert_sqlite(conn: Connection, run_id: int, part: Batch) -> bool:
    """Straight to the sqlite3 driver, many rows a statement (database.sqlite_rows):
    SQLAlchemy's per-row parameter handling would cost several times the insert itself. True if
    every row was new."""
    # NaN -> NULL (see tables.py); an object array so None survives.
    values = np.where(np.isnan(part.values), None, part.values).tolist()
    rows = zip(itertools.repeat(run_id), part.key_ids.tolist(), part.steps.tolist(), part.attempts.tolist(), values,
               part.wall_times.tolist())
    return sqlite_rows(conn, _SQLITE_INSERT, rows) == len(values)


def _remember_tail(conn: Connection, run_id: int, batch: Batch, complete: bool) -> None:
    """Keep the rows just stored for sealing (tail_cache.py); after an insert that skipped rows
    already there, this connection no longer knows the tail of these series."""
    starts = np.flatnonzero(np.r_[True, batch.key_ids[1:] != batch.key_ids[:-1]])
    ends = np.r_[starts[1:], len(batch.steps)]
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        key_id = int(batch.key_ids[lo])
        if complete:
            tail_cache.add(conn, run_id, key_id, ChunkRows(batch.steps[lo:hi], batch.attempts[lo:hi],
                                                           batch.values[lo:hi], batch.wall_times[lo:hi]))
        else:
            tail_cache.forget(conn, run_id, key_id)


def _copy_postgres(conn: Connection, data: bytes, rows: int, only_appends: bool) -> bool:
    """COPY (binary) straight into the table when every row lies past its series' mark, so no row
    can already exist; otherwise, or if another host raced us to a new series, COPY into a
    temporary table and merge with INSERT ... ON CONFLICT DO NOTHING. True if every row was new."""
    if only_appends:
        try:
            with conn.begin_nested():
                _copy_rows(conn, "metrics", data)
            return True
        except IntegrityError:
            pass
    raw = conn.connection.driver_connection
    with raw.cursor() as cur:
        cur.execute(
            "CREATE TEMP TABLE IF NOT EXISTS metrics_incoming "
            "(run_id int4, key_id int4, step int8, attempt int4, value float8, wall_time float8) "
            "ON COMMIT DELETE ROWS"
        )
    _copy_rows(conn, "metrics_incoming", data)
    with raw.cursor() as cur:
        cur.execute(
            "INSERT INTO metrics (run_id, key_id, step, attempt, value, wall_time) "
            "SELECT run_id, key_id, step, attempt, value, wall_time FROM metrics_incoming "
            "ON CONFLICT DO NOTHING"
        )
        complete = cur.rowcount == rows
        cur.execute("TRUNCATE metrics_incoming")
    return complete


def _copy_rows(conn: Connection, table: str, data: bytes) -> None:
    raw = conn.connection.driver_connection
    with raw.cursor() as cur:
        with cur.copy(
            f"COPY {table} (run_id, key_id, step, attempt, value, wall_time) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.write(data)


# PostgreSQL's binary COPY: a signature, 32-bit flags and header-extension length (both 0); then per
# row a 16-bit field count and each field as a 32-bit length (-1: NULL) and its big-endian bytes;
# a count of -1 ends the data.
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_COPY_TRAILER = b"\xff\xff"


def _copy_layout(with_value: bool) -> np.dtype:
    fields = [("count", ">i2")]
    for name, kind in (("run_id", ">i4"), ("key_id", ">i4"), ("step", ">i8"), ("attempt", ">i4"),
                       ("value", ">f8"), ("wall_time", ">f8")):
        fields.append((f"{name}_len", ">i4"))
        if name != "value" or with_value:
            fields.append((name, kind))
    return np.dtype(fields)


_WITH_VALUE, _NULL_VALUE = _copy_layout(True), _copy_layout(False)


def _binary_copy(run_id: int, part: Batch) -> bytes:
    """Rows in binary COPY form, laid out by NumPy a column at a time: psycopg's write_row costs a
    Python call a row, which was most of a write. A NaN value goes as NULL (see tables.py): those
    rows, without the value's bytes, follow the others (a COPY's row order does not matter)."""
    null = np.isnan(part.values)
    blocks = [_COPY_HEADER]
    for layout, mask in ((_WITH_VALUE, ~null), (_NULL_VALUE, null)):
        n = int(mask.sum())
        if not n:
            continue
        rows = np.empty(n, dtype=layout)
        rows["count"] = 6
        for name, column, size in (("run_id", run_id, 4), ("key_id", part.key_ids[mask], 4),
                                   ("step", part.steps[mask], 8), ("attempt", part.attempts[mask], 4),
                                   ("value", part.values[mask], 8), ("wall_time", part.wall_times[mask], 8)):
            if name in layout.names:
                rows[f"{name}_len"] = size
                rows[name] = column
            else:
                rows[f"{name}_len"] = -1
        blocks.append(rows.tobytes())
    blocks.append(_COPY_TRAILER)
    return b"".join(blocks)


# The merge's parameters in the order the statement names them.
_ROLLUP_FIELDS = tuple(re.findall(r":(\w+)", _ROLLUP_MERGE))


def _merge_rollup_rows(conn: Connection, rows: list[tuple]) -> None:
    """Run the rollup merge for rows of _ROLLUP_FIELDS through the driver, many rows a statement
    on SQLite (database.sqlite_rows), executemany elsewhere: SQLAlchemy's per-row parameter
    handling cost more than the merge for a wide write."""
    if not rows:
        return
    if conn.dialect.name == "sqlite":
        sqlite_rows(conn, re.sub(r":\w+", "?", _ROLLUP_MERGE), rows)
    else:
        conn.exec_driver_sql(re.sub(r":\w+", "%s", _ROLLUP_MERGE), rows)


def _rollup_params(run_id: int, level: int, agg: dict[str, np.ndarray]) -> list[tuple]:
    def ints(col):
        return agg[col].astype(np.int64).tolist()

    def ints_or_none(col):
        return [None if v < 0 else v for v in ints(col)]

    def floats_or_none(col):
        return [None if v != v else v for v in agg[col].astype(float).tolist()]

    columns = {
        "key_id": ints("key_id"),
        "bucket": ints("bucket"),
        "n": ints("n"),
        "nonfinite": ints("nonfinite"),
        "total": floats_or_none("total"),
        "min_step": ints_or_none("min_step"),
        "min_value": floats_or_none("min_value"),
        "max_step": ints_or_none("max_step"),
        "max_value": floats_or_none("max_value"),
        "last_step": ints("last_step"),
        "last_value": floats_or_none("last_value"),
    }
    columns["run_id"] = [run_id] * len(columns["key_id"])
    columns["level"] = [level] * len(columns["key_id"])
    return list(zip(*(columns[f] for f in _ROLLUP_FIELDS)))


def _merge_rollups(conn: Connection, run_id: int, latest: Batch) -> None:
    params = []
    for level, agg in enumerate(aggregate_levels(latest.key_ids, latest.steps, latest.values)):
        params += _rollup_params(run_id, level, agg)
    _merge_rollup_rows(conn, params)


def _merge_series(conn: Connection, run_id: int, latest: Batch) -> None:
    starts = np.flatnonzero(np.r_[True, latest.key_ids[1:] != latest.key_ids[:-1]])
    ends = np.r_[starts[1:], len(latest.steps)]
    insert_rows(
        conn,
        _SERIES_MERGE,
        [
            {"run_id": run_id, "key_id": k, "first_step": first, "last_step": last, "n": n, "last_wall_time": wall}
            for k, first, last, n, wall in zip(
                latest.key_ids[starts].tolist(),
                latest.steps[starts].tolist(),
                latest.steps[ends - 1].tolist(),
                (ends - starts).tolist(),
                np.maximum.reduceat(latest.wall_times, starts).tolist(),
            )
        ],
    )


def _rebuild_tail(conn: Connection, run_id: int, key_id: int, from_step: int) -> None:
    """Recompute rollups and the series mark of one key from `from_step`'s buckets onwards."""
    coarsest = LEVEL_WIDTHS[-1]
    start = (from_step // coarsest) * coarsest
    steps, values = metric_rows.series_rows(conn, run_id, key_id, lo=start).latest()
    key_ids = np.full(len(steps), key_id, dtype=np.int64)
    r = tables.rollups.c
    params = []
    for level, width in enumerate(LEVEL_WIDTHS):
        first_bucket = from_step // width
        conn.execute(
            delete(tables.rollups).where(
                and_(r.run_id == run_id, r.key_id == key_id, r.level == level, r.bucket >= first_bucket)
            )
        )
        keep = steps >= first_bucket * width
        params += _rollup_params(run_id, level, aggregate(key_ids[keep], steps[keep], values[keep], width))
    _merge_rollup_rows(conn, params)
    _recount_series(conn, run_id, key_id)


def _recount_series(conn: Connection, run_id: int, key_id: int) -> None:
    m = tables.metrics.c
    tail = conn.execute(
        select(func.min(m.step), func.max(m.step), func.count(func.distinct(m.step)), func.max(m.wall_time))
        .where(and_(m.run_id == run_id, m.key_id == key_id))
    ).one()
    sealed = chunks.summary(conn, run_id, key_id)
    # A step's rows are all in the tail or all in one chunk, so distinct steps add up.
    first = min(v for v in (tail[0], sealed[0]) if v is not None)
    last = max(v for v in (tail[1], sealed[1]) if v is not None)
    n = int(tail[2] or 0) + int(sealed[2] or 0)
    wall = max(v for v in (tail[3], sealed[3]) if v is not None)
    s = tables.series.c
    conn.execute(delete(tables.series).where(and_(s.run_id == run_id, s.key_id == key_id)))
    conn.execute(
        tables.series.insert().values(
            run_id=run_id, key_id=key_id, first_step=first, last_step=last, n=n, last_wall_time=wall
        )
    )
