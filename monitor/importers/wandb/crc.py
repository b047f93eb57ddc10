"""Checking the CRC-32 of every chunk of a `.wandb` log with one zlib call per 32 KiB block.

A `.wandb` file holds millions of chunks of a few hundred bytes, each with the CRC-32 (zlib's) of
its type byte and data. One `zlib.crc32` call per chunk costs more in Python than the CRC itself
(a large share of the time to read a long run: bench/RESULTS.md, design measurements). CRC-32 is linear over
GF(2), so the CRC of a whole block follows from the chunk CRCs stored in it: the block is checked
with one zlib call over its bytes, and only a block that fails is checked chunk by chunk, to name
the damaged chunk.

The arithmetic (the identities behind zlib's crc32_combine). Let R(c, B) be the CRC register
after feeding bytes B from register c (zlib's table algorithm without its final inversion), so
crc32(B) = R(F, B) ^ F with F = 0xFFFFFFFF, and let S^k be the linear map "feed k zero bytes".
Then R(c, B) = S^|B| c ^ R(0, B), and feeding a little-endian word x is S^len(x) applied to it.
A block's chunks lie back to back: D_1 H_2 D_2 ... H_m D_m, where D_i is chunk i's type byte and
data (CRC s_i) and H_i its 6 header bytes before the type byte (s_i, then its length l_i). For
the region X from D_1 to the end of D_m:

    crc32(X) ^ F = (s_m ^ F) ^ XOR over i < m of S^k_i( S^6(s_i ^ F ^ s_(i+1)) ^ S^2(l_(i+1)) ^ F )

with k_i the number of bytes of X after H_(i+1). Every S^k is applied as byte-sliced tables: a
32-bit value's four bytes index four 256-entry tables whose entries are XORed; S^k for k < 32768
is S^(128 * (k >> 7)) after S^(k & 127).

What this trades: a block whose chunks are all intact always passes, and damage to one chunk
always fails its block (each S^k is invertible), so single-chunk damage is caught exactly as the
per-chunk check catches it; damage to several chunks of one block passes only if the changes
cancel, with probability about 2^-32.
"""

from __future__ import annotations

import zlib
from functools import cache

import numpy as np

_POLY = 0xEDB88320  # CRC-32 (zlib), reflected
_F = np.uint32(0xFFFFFFFF)
_LOW_BITS = 7  # S^k = S^(128 * hi) after S^lo, lo < 128
_MAX_SHIFT = 1 << 15  # regions are inside one 32 KiB block


def crc_mismatches(buf, pos: np.ndarray, length: np.ndarray, crc: np.ndarray,
                   header: int, block_size: int) -> np.ndarray:
    """Indices of the chunks whose stored CRC (`crc`) is not the CRC-32 of their type byte and
    data. `pos` are the chunk starts in file order, each chunk `header` bytes (CRC, length, type)
    then `length` bytes of data; chunks of a block lie back to back."""
    crc = crc.astype(np.uint32)
    typed = pos + (header - 1)  # the type byte, where each CRC starts
    failed = failing_blocks(buf, pos, length, crc, header, block_size)
    # Name the damaged chunks of the failing blocks, one zlib call each.
    suspects = np.flatnonzero(np.isin(pos // block_size, failed))
    own = _crcs(buf, typed[suspects], typed[suspects] + 1 + length[suspects])
    return suspects[own != crc[suspects]]


def failing_blocks(buf, pos: np.ndarray, length: np.ndarray, crc: np.ndarray, header: int,
                   block_size: int) -> np.ndarray:
    """The blocks (file offset // block_size) whose bytes do not have the CRC their chunks' stored
    CRCs give: those holding a damaged chunk."""
    n = len(pos)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    crc = crc.astype(np.uint32)
    block = pos // block_size
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(block[1:], block[:-1], out=first[1:])
    last = np.empty(n, dtype=bool)
    last[:-1] = first[1:]
    last[-1] = True
    typed = pos + (header - 1)
    region_start = typed[first]
    region_end = (typed + 1 + length)[last]
    with memoryview(buf) as view:  # blocks are large: read in place rather than copied
        actual = _crcs(view, region_start, region_end)

    nxt = np.minimum(np.arange(1, n + 1), n - 1)
    t = _tables()
    inner = (_apply(t.s6, crc ^ _F ^ crc[nxt])
             ^ _apply(t.s2, length[nxt].astype(np.uint32), width=2) ^ _F)
    # k_i: the bytes of the region from chunk i+1's type byte on.
    ends = np.repeat(region_end, np.diff(np.append(np.flatnonzero(first), n)))
    shift = np.where(last, 0, ends - typed[nxt])
    term = _apply(t.high, _apply(t.low, inner, shift & ((1 << _LOW_BITS) - 1)),
                  shift >> _LOW_BITS)
    term[last] = crc[last] ^ _F
    expected = np.bitwise_xor.reduceat(term, np.flatnonzero(first)) ^ _F
    return block[first][expected != actual]


def _crcs(buf, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    return np.fromiter(map(zlib.crc32, map(buf.__getitem__, map(slice, starts.tolist(),
                                                                stops.tolist()))),
                       dtype=np.uint32, count=len(starts))


class _Tables:
    """Byte-sliced tables of S^k: row r of a (K, 1024) table is the map for its r-th k, its
    entry 256 * j + b the image of byte b at byte position j."""

    def __init__(self) -> None:
        table = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1)
        self.byte_table = table.astype(np.uint32)
        basis = (np.arange(256, dtype=np.uint32)[None, :]
                 << (8 * np.arange(4, dtype=np.uint32))[:, None]).reshape(-1)
        steps = 1 << _LOW_BITS
        self.low = np.empty((steps, 1024), dtype=np.uint32)
        cur = basis
        for k in range(steps):
            self.low[k] = cur
            cur = self._zero_byte(cur)
        by_steps = cur  # S^128 of the basis
        self.high = np.empty((_MAX_SHIFT >> _LOW_BITS, 1024), dtype=np.uint32)
        cur = basis
        for h in range(len(self.high)):
            self.high[h] = cur
            cur = _apply(by_steps[None, :], cur)
        self.s6 = self.low[6][None, :]
        self.s2 = self.low[2][None, :]

    def _zero_byte(self, c: np.ndarray) -> np.ndarray:
        return self.byte_table[c & 0xFF] ^ (c >> 8)


@cache
def _tables() -> _Tables:
    return _Tables()


def _apply(tables: np.ndarray, v: np.ndarray, which: np.ndarray | None = None,
           width: int = 4) -> np.ndarray:
    """The linear maps `tables[which]` (row 0 when None) applied to the values v, which have
    `width` bytes (at most 4)."""
    flat = tables.ravel()
    base = 0 if which is None else which * 1024
    out = flat[base + (v & 0xFF)]
    for j in range(1, width):
        out ^= flat[base + 256 * j + ((v >> (8 * j)) & 0xFF)]
    return out
