"""Sealed step ranges of a series as compressed columnar chunks: the store's bulk of metric rows.

A series' rows live in one of two places, split by step: chunk `c` holds every row (all attempts)
with `c * CHUNK_STEPS <= step < (c + 1) * CHUNK_STEPS` once the series has logged that range's last
step or a later one; the rows of a chunk whose range the series' last step has not yet reached the
end of stay in the `metrics` row table, the write tail (`metrics_writer.sealed_below`). A step's
rows are therefore always in one place. Reading a 1.41M-step series is then ~170 blobs instead of
1.41M rows, each of which costs the driver a Python object (bench/RESULTS.md, design measurements).

Each chunk stores its columns apart (steps as 16-bit offsets into the chunk, attempts, values, wall
times), each compressed with zstd; the floats byte-shuffled first, as Blosc does, so their sign and
exponent bytes sit together and compress. Reads that only need values never decompress wall times.
Stores written by an earlier gapwatch hold zlib-compressed chunks; they stay readable as they
are, since each blob's first bytes say which codec made it.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import zstandard
from sqlalchemy import Connection, and_, bindparam, delete, func, select

from monitor.store import tables
from monitor.store.database import insert_rows

# Steps a chunk spans in a new store. The width is recorded in the store when its chunk table is
# made (`width` reads it back), since every chunk's range depends on it. 8,192 steps: a 1.41M-step
# series is 173 chunks, and resealing one after a restart (decompress, merge, compress) takes about
# a millisecond per metric.
CHUNK_STEPS = 8192
_META_KEY = "chunk_steps"
# zstd's level 1: on the store's chunks as small as zlib's fastest level, several times as fast
# to compress (which an import of a long run spends much of its time on) and to decompress
# (bench/bench_chunk_codec.py).
_LEVEL = 1
# Every zstd frame starts with these bytes; no zlib stream can (its first two bytes, read as a
# big-endian number, are a multiple of 31, and 0x28B5 is not).
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_c = tables.metric_chunks.c


@dataclass
class ChunkRows:
    """Rows of one chunk (or several), ordered by (step, attempt), one per pair."""

    steps: np.ndarray
    attempts: np.ndarray
    values: np.ndarray
    wall_times: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.steps)


def record_width(conn: Connection) -> None:
    """Fix a new store's chunk width (CHUNK_STEPS now)."""
    conn.execute(tables.meta.insert().values(key=_META_KEY, value=str(CHUNK_STEPS)))


def width(conn: Connection) -> int:
    """The store's chunk width, read once per database connection."""
    cached = conn.info.get(_META_KEY)
    if cached is None:
        cached = int(conn.execute(select(tables.meta.c.value).where(tables.meta.c.key == _META_KEY)).scalar_one())
        conn.info[_META_KEY] = cached
    return cached


# One compressor and one decompressor a thread, made once: a zstd context is not safe to share
# between threads, and making one a call costs a good part of compressing a small column.
_contexts = threading.local()


def _pack(raw: bytes | np.ndarray) -> bytes:
    compressor = getattr(_contexts, "compressor", None)
    if compressor is None:
        compressor = _contexts.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return compressor.compress(raw)


def _unpack(blob: bytes) -> bytes:
    if blob[:4] != _ZSTD_MAGIC:
        return zlib.decompress(blob)
    decompressor = getattr(_contexts, "decompressor", None)
    if decompressor is None:
        decompressor = _contexts.decompressor = zstandard.ZstdDecompressor()
    return decompressor.decompress(blob)


def _shuffle(floats: np.ndarray) -> np.ndarray:
    """The floats' bytes, byte 0 of every float first, then byte 1...: one flat buffer, handed to
    the compressor as it is."""
    little = np.asarray(floats, dtype="<f8")  # no copy on a little-endian machine
    return np.ascontiguousarray(little.view(np.uint8).reshape(-1, 8).T).reshape(-1)


def _unshuffle(raw: bytes) -> np.ndarray:
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(8, -1)
    return np.ascontiguousarray(planes.T).view("<f8").reshape(-1).astype(float, copy=False)


def encode(chunk: int, width: int, rows: ChunkRows) -> dict:
    """The chunk table's row for these rows (all within chunk `chunk` of `width` steps)."""
    offsets = rows.steps - chunk * width
    if len(offsets) and (offsets.min() < 0 or offsets.max() >= width):
        raise ValueError(f"rows outside chunk {chunk}")
    distinct = int(np.count_nonzero(np.r_[True, rows.steps[1:] != rows.steps[:-1]])) if len(rows) else 0
    return {
        "chunk": chunk,
        "n": len(rows),
        "n_steps": distinct,
        "first_step": int(rows.steps[0]),
        "last_step": int(rows.steps[-1]),
        "max_wall_time": float(np.max(rows.wall_times)),
        "step_data": _pack(offsets.astype("<u2").tobytes()),
        "attempt_data": _pack(rows.attempts.astype("<i4").tobytes()),
        "value_data": _pack(_shuffle(rows.values)),
        "wall_time_data": _pack(_shuffle(rows.wall_times)),
    }


def _decode(chunk: int, width: int, step_data: bytes, attempt_data: bytes, value_data: bytes,
            wall_time_data: bytes | None = None) -> ChunkRows:
    steps = np.frombuffer(_unpack(step_data), dtype="<u2").astype(np.int64) + chunk * width
    attempts = np.frombuffer(_unpack(attempt_data), dtype="<i4").astype(np.int64)
    values = _unshuffle(_unpack(value_data))
    walls = None if wall_time_data is None else _unshuffle(_unpack(wall_time_data))
    return ChunkRows(steps, attempts, values, walls)


def read(conn: Connection, run_id: int, key_ids: Iterable[int] | None = None, lo: int | None = None,
         hi: int | None = None, chunks: Iterable[int] | None = None, with_wall_times: bool = False,
         descending: bool = False, limit: int | None = None) -> Iterator[tuple[int, int, ChunkRows]]:
    """(key id, chunk, rows) of the chunks of a run that may hold steps in [lo, hi] (either open)
    or are among `chunks`, ordered by key and chunk, at most `limit`. Rows are whole chunks: the
    caller trims. Fetched whole and decoded one by one, so read a key at a time for a long run."""
    steps = width(conn)
    cond = _c.run_id == run_id
    if key_ids is not None:
        cond = and_(cond, _c.key_id.in_(list(key_ids)))
    if lo is not None:
        cond = and_(cond, _c.chunk >= lo // steps)
    if hi is not None:
        cond = and_(cond, _c.chunk <= hi // steps)
    if chunks is not None:
        cond = and_(cond, _c.chunk.in_([int(c) for c in chunks]))
    columns = [_c.key_id, _c.chunk, _c.step_data, _c.attempt_data, _c.value_data]
    if with_wall_times:
        columns.append(_c.wall_time_data)
    query = select(*columns).where(cond).order_by(_c.key_id, _c.chunk.desc() if descending else _c.chunk)
    got = conn.execute(query if limit is None else query.limit(limit)).all()
    for i in range(len(got)):
        key_id, chunk, *blobs = got[i]
        got[i] = None  # each compressed chunk freed once decoded
        yield int(key_id), int(chunk), _decode(int(chunk), steps, *blobs)


def read_series(conn: Connection, run_id: int, key_id: int, lo: int | None = None,
                hi: int | None = None) -> Iterator[ChunkRows]:
    """The sealed rows of one series in the chunks that may hold steps in [lo, hi] (either open;
    the caller trims), in (step, attempt) order, in parts of whole chunks. A rarely
    logged series (evals every few thousand steps) has a handful of rows in each of ~170 chunks:
    consecutive chunks are decoded together until a part holds a chunk's width of rows, so such a
    series costs a few array operations, not a few per chunk; a series logged every step still
    comes a chunk at a time."""
    steps = width(conn)
    cond = and_(_c.run_id == run_id, _c.key_id == key_id)
    if lo is not None:
        cond = and_(cond, _c.chunk >= lo // steps)
    if hi is not None:
        cond = and_(cond, _c.chunk <= hi // steps)
    query = select(_c.chunk, _c.step_data, _c.attempt_data, _c.value_data).where(cond).order_by(_c.chunk)
    got = conn.execute(query).all()
    batch: list[tuple[int, bytes, bytes, bytes]] = []
    rows = 0
    for i in range(len(got)):
        chunk, step_data, attempt_data, value_data = got[i]
        got[i] = None  # each compressed chunk freed once decoded
        offsets = _unpack(step_data)
        batch.append((int(chunk), offsets, _unpack(attempt_data), _unpack(value_data)))
        rows += len(offsets) // 2
        if rows >= steps:
            yield _decode_batch(batch, steps)
            batch, rows = [], 0
    if batch:
        yield _decode_batch(batch, steps)


def _decode_batch(batch: list[tuple[int, bytes, bytes, bytes]], width: int) -> ChunkRows:
    """Decompressed columns of consecutive chunks as one ChunkRows."""
    if len(batch) == 1:
        chunk, offsets, attempts, values = batch[0]
        return ChunkRows(np.frombuffer(offsets, dtype="<u2").astype(np.int64) + chunk * width,
                         np.frombuffer(attempts, dtype="<i4").astype(np.int64), _unshuffle(values))
    sizes = np.array([len(offsets) // 2 for _, offsets, _, _ in batch], dtype=np.int64)
    starts = np.repeat(np.array([c for c, _, _, _ in batch], dtype=np.int64) * width, sizes)
    steps = np.frombuffer(b"".join(o for _, o, _, _ in batch), dtype="<u2").astype(np.int64) + starts
    attempts = np.frombuffer(b"".join(a for _, _, a, _ in batch), dtype="<i4").astype(np.int64)
    # Each chunk's values are 8 byte planes of its n rows (_shuffle): byte b of its row j sits at
    # 8 * (rows before the chunk) + b * n + j of the joined bytes.
    first = np.cumsum(sizes) - sizes
    row_first, row_size = np.repeat(first, sizes), np.repeat(sizes, sizes)
    local = np.arange(len(steps), dtype=np.int64) - row_first
    where = (8 * row_first + local)[:, None] + np.arange(8, dtype=np.int64)[None, :] * row_size[:, None]
    raw = np.frombuffer(b"".join(v for _, _, _, v in batch), dtype=np.uint8)
    values = np.ascontiguousarray(raw[where]).view("<f8").reshape(-1).astype(float, copy=False)
    return ChunkRows(steps, attempts, values)


def logged_steps(conn: Connection, run_id: int, key_ids: list[int]) -> np.ndarray:
    """Every step that any of these series holds in chunks, sorted and distinct. Only the step
    columns are read (two bytes a step), and a chunk's steps are marked in one mask per chunk
    whichever series holds them, so a run of many metrics costs a mask, not a copy of its steps
    per metric. A chunk logged at every step of its range says so in its counts, and is marked
    without decompressing anything; so is one whose range such a chunk of another series already
    covers (the evals of a run that logs its loss every step), marked first: only the other
    chunks' steps are fetched and read."""
    steps = width(conn)
    marked: dict[int, np.ndarray] = {}
    mine = and_(_c.run_id == run_id, _c.key_id.in_(list(key_ids)))
    whole = _c.n_steps == _c.last_step - _c.first_step + 1
    got = conn.execute(select(_c.key_id, _c.chunk, whole, _c.first_step, _c.last_step).where(mine)).all()
    got.sort(key=lambda row: not row[2])
    uncovered: list[tuple[int, int]] = []
    for key_id, chunk, is_whole, first, last in got:
        mask = marked.get(chunk)
        if mask is None:
            mask = marked[chunk] = np.zeros(steps, dtype=bool)
        start = chunk * steps
        span = mask[first - start:last - start + 1]
        if is_whole:
            span[:] = True
        elif not span.all():
            uncovered.append((key_id, chunk))
    if uncovered:
        wanted = set(uncovered)
        query = select(_c.key_id, _c.chunk, _c.step_data).where(
            and_(mine, _c.chunk.in_(sorted({c for _, c in uncovered}))))
        for key_id, chunk, step_data in conn.execute(query).all():
            if (key_id, chunk) in wanted:
                marked[chunk][np.frombuffer(_unpack(step_data), dtype="<u2")] = True
    parts = [np.flatnonzero(marked[c]).astype(np.int64) + c * steps for c in sorted(marked)]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def keys(conn: Connection, run_id: int) -> list[int]:
    """Key ids that have chunks in a run."""
    return [int(k) for (k,) in conn.execute(select(_c.key_id).where(_c.run_id == run_id).distinct())]


def write(conn: Connection, run_id: int, key_id: int, chunk: int, rows: ChunkRows) -> None:
    """Store (or replace) one chunk."""
    write_many(conn, run_id, [(key_id, chunk, rows)], replacing=[(key_id, chunk)])


def write_many(conn: Connection, run_id: int, written: list[tuple[int, int, ChunkRows]],
               replacing: Iterable[tuple[int, int]] = ()) -> None:
    """Store chunks (key id, chunk, rows), after deleting the stored (key id, chunk) pairs they
    replace; one statement each, however many chunks."""
    gone = [{"r": run_id, "k": k, "c": c} for k, c in replacing]
    if gone:
        conn.execute(delete(tables.metric_chunks).where(and_(
            _c.run_id == bindparam("r"), _c.key_id == bindparam("k"), _c.chunk == bindparam("c"))), gone)
    steps = width(conn)
    insert_rows(conn, tables.metric_chunks.insert(),
                [{"run_id": run_id, "key_id": k, **encode(c, steps, r)} for k, c, r in written])


def summary(conn: Connection, run_id: int, key_id: int) -> tuple:
    """(first step, last step, distinct steps, latest wall time) over a series' chunks; Nones if it
    has none."""
    return conn.execute(
        select(func.min(_c.first_step), func.max(_c.last_step), func.sum(_c.n_steps), func.max(_c.max_wall_time))
        .where(and_(_c.run_id == run_id, _c.key_id == key_id))
    ).one()


def count(conn: Connection, run_id: int) -> int:
    """Rows kept in a run's chunks, every attempt counted."""
    return int(conn.execute(select(func.coalesce(func.sum(_c.n), 0)).where(_c.run_id == run_id)).scalar_one())


def merge_first_wins(parts: list[ChunkRows]) -> ChunkRows:
    """The union of several row sets, ordered by (step, attempt); a (step, attempt) present in more
    than one keeps the earliest part's row, as the row table's ON CONFLICT DO NOTHING does."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return ChunkRows(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.empty(0))
    if len(parts) == 1:
        return parts[0]
    steps = np.concatenate([p.steps for p in parts])
    attempts = np.concatenate([p.attempts for p in parts])
    values = np.concatenate([p.values for p in parts])
    walls = np.concatenate([p.wall_times for p in parts])
    order = np.lexsort((attempts, steps))  # stable: equal pairs keep the parts' order
    steps, attempts, values, walls = steps[order], attempts[order], values[order], walls[order]
    first = np.r_[True, (steps[1:] != steps[:-1]) | (attempts[1:] != attempts[:-1])]
    return ChunkRows(steps[first], attempts[first], values[first], walls[first])
