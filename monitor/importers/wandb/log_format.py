"""The container format of W&B `.wandb` files: a LevelDB-style log of length-prefixed records.

Layout (as wandb 0.31 writes it, checked against files it wrote):
* a 7-byte file header: `:W&B`, the magic 0xBEE1 (little endian) and version 0;
* then 32 KiB blocks counted from the start of the file; each holds chunks with a 7-byte header
  (CRC-32 little endian, data length uint16 little endian, chunk type) and the data. The CRC is
  plain (unmasked) CRC-32 of the type byte followed by the data;
* a record that does not fit the rest of a block is split into FIRST, MIDDLE..., LAST chunks; a
  block with fewer than 7 bytes left is padded with zeros;
* while a run is going, wandb writes whole blocks when busy and flushes the chunks it has when
  idle, so a live file ends after a complete chunk, possibly inside a record split over blocks
  (its LAST chunk not written yet), never inside a chunk.

`read_records` finds the complete records from an offset and says where to continue (`iter_records`
does the same a segment of the file at a time). What it means
when the data stops is the caller's decision: `pending` (a split record not finished: normal for a
live file) and `torn_at` (the data stops inside a chunk: the file was cut short, or its writer is in
the middle of a write). Damage (bad header, checksum mismatch, impossible chunk sequence) is a
GapwatchError naming the file, the record number and the byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from monitor.errors import GapwatchError

from .crc import crc_mismatches

FILE_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK_SIZE = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")
HEADER_SIZE = CHUNK_HEADER.size
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# Blocks checked and split into records at a time (64 MiB): the per-chunk arrays of a whole large
# file are too big for the allocator to reuse, and much smaller segments cost more numpy calls
# (measured in bench/RESULTS.md, "Design measurements").
SEGMENT_BLOCKS = 2048


@dataclass
class LogRead:
    """Complete records found from one position, and where to pick up next time.

    A record stored in one chunk is the byte range starts[i]:stops[i] of the buffer; a record
    split over blocks has starts[i] == -1 and its joined bytes in `split[i]`.
    """

    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    stops: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    split: dict[int, bytes] = field(default_factory=dict)
    next_offset: int = len(FILE_HEADER)  # first chunk not consumed (a record boundary)
    pending: bool = False  # the data ends inside a record split over blocks
    torn_at: int | None = None  # the data ends inside a chunk that starts here

    @property
    def count(self) -> int:
        return len(self.starts)

    def payload(self, buf, i: int) -> bytes:
        if self.starts[i] < 0:
            return self.split[i]
        return bytes(buf[self.starts[i]:self.stops[i]])


def check_file_header(head: bytes, source: str) -> None:
    if len(head) < len(FILE_HEADER):
        raise GapwatchError(f"{source}: too short to be a W&B run file ({len(head)} bytes)")
    if bytes(head[:4]) != FILE_HEADER[:4]:
        raise GapwatchError(f"{source}: not a W&B run file (no ':W&B' header)")
    if bytes(head[:len(FILE_HEADER)]) != FILE_HEADER:
        magic, version = struct.unpack_from("<HB", head, 4)
        raise GapwatchError(
            f"{source}: unsupported W&B log header (magic {magic:#x}, version {version})"
        )


def read_records(buf, source: str, offset: int = len(FILE_HEADER),
                 first_record: int = 0) -> LogRead:
    """Locate and check every complete record in `buf` (the whole file, bytes or mmap) from
    `offset` on; `first_record` is the number of the record at `offset` (for messages)."""
    parts = list(iter_records(buf, source, offset, first_record))
    if len(parts) == 1:
        return parts[0]
    out = LogRead(starts=np.concatenate([p.starts for p in parts]),
                  stops=np.concatenate([p.stops for p in parts]),
                  next_offset=parts[-1].next_offset, pending=parts[-1].pending,
                  torn_at=parts[-1].torn_at)
    done = 0
    for part in parts:
        out.split.update({done + i: body for i, body in part.split.items()})
        done += part.count
    return out


def iter_records(buf, source: str, offset: int = len(FILE_HEADER),
                 first_record: int = 0) -> Iterator[LogRead]:
    """read_records a segment of the file at a time (SEGMENT_BLOCKS blocks, ending where a
    record does), so that the per-chunk arrays stay small; the last segment says how the data
    ends (pending, torn_at)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    n = len(data)
    blocks = SEGMENT_BLOCKS
    while True:
        end = min(n, (offset // BLOCK_SIZE + blocks) * BLOCK_SIZE)
        part = _records_in(buf, data[:end], source, offset, first_record)
        if end < n and part.count == 0:
            blocks *= 2  # a record longer than a segment: look further
            continue
        yield part
        if end >= n:
            return
        first_record += part.count
        offset = part.next_offset
        blocks = SEGMENT_BLOCKS


def _records_in(buf, data: np.ndarray, source: str, offset: int, first_record: int) -> LogRead:
    """The complete records of data[offset:], checked (data: the file's bytes up to where this
    look stops, at a block boundary or the end)."""
    pos, length, kind, crc, torn_at = _walk_blocks(data, offset, source, first_record)
    starts_record = (kind == FULL) | (kind == FIRST)
    numbers = first_record + np.cumsum(starts_record) - starts_record.astype(np.int64)
    wrong = crc_mismatches(buf, pos, length, crc, HEADER_SIZE, BLOCK_SIZE)
    if len(wrong):
        i = int(wrong[0])
        raise _damaged(source, int(numbers[i]), int(pos[i]),
                       "checksum mismatch (the file is damaged)")
    return _assemble(buf, pos, length, kind, numbers, torn_at, offset, source)


def _walk_blocks(data: np.ndarray, offset: int, source: str, first_record: int):
    """Chunk headers from `offset` on, in file order. Chunks never cross a 32 KiB block, so every
    block is walked at the same time: one numpy pass per chunk position within a block, carrying
    only the blocks not yet finished, reading each header as one word. The headers are checked
    once all are found."""
    n = len(data)
    # 8-byte words starting one byte before each offset: a 7-byte header is the high 7 bytes of
    # the word read at its start - 1 (every header starts after the file's own 7-byte header).
    words = np.ndarray((max(n - 7, 0),), dtype="<u8", buffer=data, strides=(1,))
    first_block = offset // BLOCK_SIZE
    blocks = np.arange(first_block, (n + BLOCK_SIZE - 1) // BLOCK_SIZE, dtype=np.int64)
    p = blocks * BLOCK_SIZE
    if len(p):
        p[0] = offset
    limit = (blocks + 1) * BLOCK_SIZE
    live = np.flatnonzero((limit - p >= HEADER_SIZE) & (p < n))
    b, p, limit = live, p[live], limit[live]
    found = []  # (blocks, chunk starts) at each chunk position
    zeroed = []  # positions where a chunk should start and all is zeros
    torn_at = None
    while len(b):
        if p[-1] + HEADER_SIZE > n:
            # Only the last block can hold the end of the data: it ends inside this header.
            torn_at = int(p[-1])
            b, p, limit = b[:-1], p[:-1], limit[:-1]
            if not len(b):
                break
        header = words[p - 1] >> np.uint64(8)
        stop = p + HEADER_SIZE + ((header >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
        # An all-zero header with a header's room left in its block: zeros where the writer
        # puts a chunk (it pads only the last 6 bytes of a block), so records were lost.
        chunk = header != 0
        if chunk.all():
            found.append((b, p))
        else:
            found.append((b[chunk], p[chunk]))
            zeroed.append(p[~chunk])
        more = chunk & (limit - stop >= HEADER_SIZE) & (stop < n)
        b, p, limit = b[more], stop[more], limit[more]
    if found:
        rank = np.repeat(np.arange(len(found)), [len(f[0]) for f in found])
        b, pos = (np.concatenate(col) for col in zip(*found))
        # Found block by block at each position: put them in file order (block, then rank).
        counts = np.bincount(b)
        pos = _placed(pos, (np.cumsum(counts) - counts)[b] + rank)
    else:
        pos = np.zeros(0, dtype=np.int64)
    header = words[pos - 1] >> np.uint64(8)
    crc = (header & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    length = ((header >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
    kind = (header >> np.uint64(48)).astype(np.int64)
    stop = pos + HEADER_SIZE + length
    past_block = stop > (pos // BLOCK_SIZE + 1) * BLOCK_SIZE
    bad_kind = kind > LAST
    wrong = np.flatnonzero(past_block | bad_kind)

    def begun_before(at: int) -> int:
        """How many records began before byte `at`: the damage there is in the next one."""
        return first_record + int(np.count_nonzero(((kind == FULL) | (kind == FIRST)) & (pos < at)))

    if len(wrong):
        i = int(wrong[0])
        problem = (f"a chunk of {int(length[i])} bytes runs past its 32 KiB block"
                   if past_block[i] else f"unknown chunk type {int(kind[i])}")
        raise _damaged(source, begun_before(pos[i]), int(pos[i]), problem)
    if zeroed:
        at = int(np.concatenate(zeroed).min())
        raise _damaged(source, begun_before(at), at, "zeros where a record should start: the records from "
                       "here to the end of its 32 KiB block are unreadable (the file is damaged)")
    cut = np.flatnonzero(stop > n)
    if len(cut):
        torn_at = min(torn_at or n, int(pos[cut[0]]))
    if torn_at is not None:
        keep = pos < torn_at
        pos, length, kind, crc = pos[keep], length[keep], kind[keep], crc[keep]
    return pos, length, kind, crc, torn_at


def _placed(col: np.ndarray, dest: np.ndarray) -> np.ndarray:
    out = np.empty_like(col)
    out[dest] = col
    return out


def _assemble(buf, pos, length, kind, numbers, torn_at, offset, source) -> LogRead:
    """Records from chunks: FULL chunks are records; FIRST, MIDDLE..., LAST are joined."""
    out = LogRead(torn_at=torn_at)
    record_of_chunk = numbers - (numbers[0] if len(numbers) else 0)
    starts = np.where(kind == FULL, pos + HEADER_SIZE, -1)
    stops = np.where(kind == FULL, pos + HEADER_SIZE + length, -1)
    begins = (kind == FULL) | (kind == FIRST)
    out.starts = starts[begins]
    out.stops = stops[begins]
    split_chunks = np.flatnonzero(kind != FULL)
    open_record = None
    parts: list[bytes] = []
    for i in split_chunks.tolist():
        k = int(kind[i])
        p = int(pos[i])
        body = bytes(buf[p + HEADER_SIZE:p + HEADER_SIZE + int(length[i])])
        if k == FIRST:
            if open_record is not None:
                raise _damaged(source, int(numbers[i]), p, "a split record starts inside another")
            open_record, parts, first_pos = int(record_of_chunk[i]), [body], p
        elif open_record is None:
            raise _damaged(source, int(numbers[i]), p, "the rest of a split record without its start")
        else:
            if i > 0 and kind[i - 1] == FULL and int(record_of_chunk[i - 1]) >= open_record:
                raise _damaged(source, int(numbers[i]), p, "a whole record inside a split one")
            parts.append(body)
            if k == LAST:
                out.split[open_record] = b"".join(parts)
                open_record = None
    if len(pos):
        last = len(pos) - 1
        out.next_offset = int(pos[last] + HEADER_SIZE + length[last])
    else:
        out.next_offset = offset
    if open_record is not None:
        # The record's LAST chunk is not written yet: leave it for the next read.
        out.pending = True
        out.starts = out.starts[:open_record]
        out.stops = out.stops[:open_record]
        out.next_offset = first_pos
    return out


def _damaged(source: str, record: int, offset: int, problem: str) -> GapwatchError:
    return GapwatchError(f"{source}: record {record + 1} at byte {offset}: {problem}")
