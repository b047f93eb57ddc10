"""The store's chunk compression, zstd (what chunks.py writes) against zlib's fastest level (what
it wrote before), side by side on the chunks of a run as wide as a real one.

The chunks are those the store would seal from bench/wide_pair.py's series (10 every step, 11
held-out sets, 40 tasks with their stderr), each column laid out as chunks.encode lays it out
(step offsets, attempts, byte-shuffled values and wall times). Each codec compresses and
decompresses every column of every chunk; the table gives the time of each, and the bytes stored.
"""

from __future__ import annotations

import argparse
import time
import zlib

import numpy as np

from bench import wide_pair
from bench.results import record, table
from monitor.store import chunks

CODECS = {
    "zlib, level 1": (lambda raw: zlib.compress(raw, 1), zlib.decompress),
    "zstd, level 1 (chunks.py)": (chunks._pack, chunks._unpack),
}


def chunk_columns(steps: int) -> list[bytes]:
    """Every column of every chunk of one run of `steps` steps, uncompressed."""
    series: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for s, dense, sparse in wide_pair.blocks(steps, seed=1, shift=0.0):
        for key, values in dense.items():
            series.setdefault(key, []).append((s, values))
        for key, (at, values) in sparse.items():
            series.setdefault(key, []).append((at, values))
    columns = []
    width = chunks.CHUNK_STEPS
    for parts in series.values():
        at = np.concatenate([p[0] for p in parts])
        values = np.concatenate([p[1] for p in parts])
        walls = 1.7e9 + at * 0.51
        for chunk in np.unique(at // width):
            inside = at // width == chunk
            columns += [(at[inside] - chunk * width).astype("<u2").tobytes(),
                        np.ones(int(inside.sum()), "<i4").tobytes(),
                        chunks._shuffle(values[inside]), chunks._shuffle(walls[inside])]
    return columns


def measure(columns: list[bytes]) -> list[dict]:
    rows = []
    raw_mb = sum(map(len, columns)) / 1e6
    for name, (compress, decompress) in CODECS.items():
        started = time.perf_counter()
        packed = [compress(c) for c in columns]
        packing = time.perf_counter() - started
        started = time.perf_counter()
        for p in packed:
            decompress(p)
        unpacking = time.perf_counter() - started
        stored_mb = sum(map(len, packed)) / 1e6
        rows.append({"codec": name, "compress s": f"{packing:.2f}", "compress MB/s": f"{raw_mb / packing:,.0f}",
                     "decompress s": f"{unpacking:.2f}", "decompress MB/s": f"{raw_mb / unpacking:,.0f}",
                     "stored MB": f"{stored_mb:.1f}", "of raw": f"{stored_mb / raw_mb:.0%}"})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_chunk_codec")
    parser.add_argument("--quick", action="store_true", help="100k steps instead of 1.41M")
    parser.add_argument("--no-record", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args(argv)
    steps = 100_000 if args.quick else 1_410_000
    columns = chunk_columns(steps)
    rows = measure(columns)
    print(table(rows))
    if not args.no_record and not args.quick:
        record("chunk_codec", f"Chunk compression: the chunks of one {steps:,}-step run of 101 series",
               f"{len(columns) // 4:,} chunks, {sum(map(len, columns)) / 1e6:,.0f} MB of columns before "
               "compression. bench/bench_chunk_codec.py: each codec compresses then decompresses "
               "every column of every chunk in turn, in one process.\n\n" + table(rows))


if __name__ == "__main__":
    main()
