"""A pair of runs as wide as real pre-training logs, written as files a user imports.

OLMo-style logging: DENSE metrics every step, HELDOUT_SETS held-out losses every HELDOUT_EVERY
steps, TASKS downstream tasks (accuracy and its stderr) every TASK_EVERY steps: about 100 series.
The token count grows by a varying amount a step (packed batches), so no run has a
tokens_per_step. The candidate drifts below its reference late in training, the shape gapwatch
exists to catch. Each run is written a block of steps at a time, as a JSONL file (one object a
step, only the keys logged at it) and as a CSV file with a `step` header (a column a series,
empty where nothing was logged), so memory stays flat in the run's length.

    python -m bench.wide_pair OUT_DIR --steps 300000
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from monitor import schema

HELDOUT_SETS = ("c4_en", "dolma_books", "dolma_common_crawl", "dolma_pes2o", "dolma_reddit", "dolma_stack",
                "dolma_wiki", "ice", "m2d2_s2orc", "pile", "wikitext_103")
TASKS = tuple(f"task_{i:02d}" for i in range(40))
HELDOUT_EVERY = 1000
TASK_EVERY = 2500
BLOCK_STEPS = 50_000
DENSE = (schema.TRAIN_LOSS, schema.TRAIN_GRAD_NORM, schema.TRAIN_TOKENS, schema.OPTIM_LR,
         schema.PERF_STEP_TIME_S, schema.PERF_TOKENS_PER_S, schema.PERF_MFU, schema.DATA_CURSOR,
         schema.DATA_EPOCH, schema.DATA_UNIQUE_FRACTION)
RUNS = (("ref", 2, 0.0), ("cand", 1, -0.08))


def columns() -> list[str]:
    """Every series of a run, in the CSV's column order."""
    return [*DENSE, *(schema.heldout_key(h, "loss") for h in HELDOUT_SETS),
            *(k for t in TASKS for k in (schema.downstream_key(t, "acc"), schema.downstream_key(t, "acc", "stderr")))]


def blocks(steps: int, seed: int, shift: float):
    """(step array, {key: values}) a block of steps at a time; sparse keys hold their steps' values
    only, under the key with their own step array: {key: (steps, values)}."""
    rng = np.random.default_rng(seed)
    tokens_so_far = 0.0
    for lo in range(1, steps + 1, BLOCK_STEPS):
        s = np.arange(lo, min(lo + BLOCK_STEPS, steps + 1))
        late = s > int(steps * 0.65)
        loss = 2.3 + 3.0 * (s / 1000.0 + 1) ** -0.3 + rng.normal(0, 0.03, len(s)) + shift * late
        step_time = 0.5 + rng.gamma(2.0, 0.002, len(s))
        tokens = tokens_so_far + np.cumsum(rng.integers(3000, 4097, len(s))).astype(float)
        tokens_so_far = float(tokens[-1])
        dense = {
            schema.TRAIN_LOSS: loss, schema.TRAIN_GRAD_NORM: 0.3 * np.exp(rng.normal(0, 0.05, len(s))),
            schema.TRAIN_TOKENS: tokens, schema.OPTIM_LR: np.minimum(s / 2000.0, 1.0) * 3e-4,
            schema.PERF_STEP_TIME_S: step_time, schema.PERF_TOKENS_PER_S: 4096.0 / step_time,
            schema.PERF_MFU: 0.2 / step_time, schema.DATA_CURSOR: s * 8.0,
            schema.DATA_EPOCH: np.floor(s * 8.0 / 4e6), schema.DATA_UNIQUE_FRACTION: np.minimum(s * 8.0 / 4e6, 1.0),
        }
        sparse: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        ev = s[s % HELDOUT_EVERY == 0]
        for i, name in enumerate(HELDOUT_SETS):
            held = 2.4 + 0.05 * i + 3.0 * (ev / 1000.0 + 1) ** -0.3 + rng.normal(0, 0.003, ev.size)
            sparse[schema.heldout_key(name, "loss")] = (ev, held)
        ds = s[s % TASK_EVERY == 0]
        for i, task in enumerate(TASKS):
            acc = 0.3 + 0.01 * i - 0.3 * (ds / 1000.0 + 1) ** -0.3 + rng.normal(0, 0.005, ds.size)
            sparse[schema.downstream_key(task, "acc")] = (ds, acc)
            sparse[schema.downstream_key(task, "acc", "stderr")] = (ds, np.sqrt(acc * (1 - acc) / 2000))
        yield s, dense, sparse


def write_run(jsonl: Path, csv: Path, steps: int, seed: int, shift: float) -> None:
    names = columns()
    where = {k: i for i, k in enumerate(names)}
    with open(jsonl, "w") as fj, open(csv, "w") as fc:
        fc.write("step," + ",".join(names) + "\n")
        for s, dense, sparse in blocks(steps, seed, shift):
            rows = [dict(zip(dense, values)) for values in zip(*(v.tolist() for v in dense.values()))]
            for key, (at, values) in sparse.items():
                for step, value in zip(at.tolist(), values.tolist()):
                    rows[step - int(s[0])][key] = value
            for step, row in zip(s.tolist(), rows):
                fj.write(json.dumps({"step": step, **row}) + "\n")
                cells = [""] * len(names)
                for key, value in row.items():
                    cells[where[key]] = repr(value) if math.isfinite(value) else ""
                fc.write(f"{step}," + ",".join(cells) + "\n")


def write_pair(out: Path, steps: int) -> dict[str, tuple[Path, Path]]:
    """Both runs' JSONL and CSV files under `out`: {name: (jsonl, csv)}."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, seed, shift in RUNS:
        files[name] = (out / f"{name}.jsonl", out / f"{name}.csv")
        write_run(*files[name], steps, seed, shift)
    return files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.wide_pair", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=1_410_000)
    args = parser.parse_args(argv)
    for name, (jsonl, csv) in write_pair(args.out, args.steps).items():
        print(f"{name}: {jsonl} ({jsonl.stat().st_size / 1e6:.0f} MB), {csv} ({csv.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
