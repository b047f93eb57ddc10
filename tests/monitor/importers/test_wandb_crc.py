"""The block-wise CRC check of `.wandb` chunks against one zlib.crc32 call per chunk."""

from __future__ import annotations

import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.errors import GapwatchError
from monitor.importers.wandb.crc import crc_mismatches, failing_blocks
from bench.wandb_log_writer import encode_log
from monitor.importers.wandb.log_format import BLOCK_SIZE, HEADER_SIZE, _walk_blocks


def _chunks(raw: bytes):
    pos, length, _, crc, _ = _walk_blocks(np.frombuffer(raw, dtype=np.uint8), 7, "x", 0)
    return pos, length, crc


def _one_by_one(raw: bytes, pos, length, crc) -> np.ndarray:
    own = np.array([zlib.crc32(raw[p + HEADER_SIZE - 1:p + HEADER_SIZE + n])
                    for p, n in zip(pos.tolist(), length.tolist())], dtype=np.uint32)
    return np.flatnonzero(own != crc)


@st.composite
def _logs(draw):
    sizes = draw(st.lists(st.integers(0, 3000), min_size=1, max_size=120))
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    return encode_log(payloads)


@settings(max_examples=60, deadline=None)
@given(_logs(), st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                         max_size=3))
def test_finds_the_chunks_a_check_per_chunk_finds(raw, damage):
    data = bytearray(raw)
    for where, flip in damage:
        data[7 + int(where * (len(data) - 7))] ^= flip
    raw = bytes(data)
    try:
        pos, length, crc = _chunks(raw)
    except GapwatchError:
        return  # a length or type damaged into nonsense: the walk reports it first
    damaged = _one_by_one(raw, pos, length, crc)
    assert np.array_equal(crc_mismatches(raw, pos, length, crc, HEADER_SIZE, BLOCK_SIZE), damaged)
    # The block check alone: exactly the blocks holding a damaged chunk fail (none when intact),
    # so the chunk-by-chunk check runs only where there is damage.
    assert np.array_equal(failing_blocks(raw, pos, length, crc, HEADER_SIZE, BLOCK_SIZE),
                          np.unique(pos[damaged] // BLOCK_SIZE))


def test_intact_log_passes_and_two_damaged_chunks_of_a_block_are_both_named():
    raw = encode_log([bytes([i]) * (50 + 37 * i) for i in range(200)])
    pos, length, crc = _chunks(raw)
    assert len(failing_blocks(raw, pos, length, crc, HEADER_SIZE, BLOCK_SIZE)) == 0
    data = bytearray(raw)
    data[int(pos[3]) + HEADER_SIZE + 5] ^= 1  # chunk 3's data
    data[int(pos[5])] ^= 0x80  # chunk 5's stored CRC
    assert pos[5] // BLOCK_SIZE == pos[3] // BLOCK_SIZE
    raw = bytes(data)
    pos, length, crc = _chunks(raw)
    assert crc_mismatches(raw, pos, length, crc, HEADER_SIZE, BLOCK_SIZE).tolist() == [3, 5]
