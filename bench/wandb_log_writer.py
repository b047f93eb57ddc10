"""Writing the `.wandb` log layout (monitor/importers/wandb/log_format.py) from record payloads, as
wandb's writer lays them out: test and benchmark files without running a training job."""

from __future__ import annotations

import zlib

from monitor.importers.wandb.log_format import (
    BLOCK_SIZE,
    CHUNK_HEADER,
    FILE_HEADER,
    FIRST,
    FULL,
    HEADER_SIZE,
    LAST,
    MIDDLE,
)

# CRC-32 of the type byte alone: the running CRC each chunk's data continues from.
TYPE_CRC = tuple(zlib.crc32(bytes([t])) for t in range(5))


def encode_log(payloads, header: bytes = FILE_HEADER) -> bytes:
    """A log in the layout above holding these record payloads (what wandb's writer produces),
    for building test and benchmark files without running a training job."""
    out = bytearray(header)
    for payload in payloads:
        pos, first = 0, True
        while True:
            room = BLOCK_SIZE - len(out) % BLOCK_SIZE
            if room < HEADER_SIZE:
                out += b"\x00" * room
                room = BLOCK_SIZE
            take = min(room - HEADER_SIZE, len(payload) - pos)
            last = pos + take == len(payload)
            kind = FULL if first and last else FIRST if first else LAST if last else MIDDLE
            body = payload[pos:pos + take]
            out += CHUNK_HEADER.pack(zlib.crc32(body, TYPE_CRC[kind]), take, kind) + body
            pos += take
            first = False
            if last:
                break
    return bytes(out)
