"""The real runs the detection-quality benchmark is built on, split once into a calibration half
and a test half by file.

Thresholds may be fitted on the calibration half only; every figure the benchmark reports is on the
test half. The split is fixed here, in sorted order, alternating within each family of files, so
that nobody chooses it after seeing a result:

* the 13 repeats of one modded-nanogpt config (valueembed_seeds): files 1, 3, 5, ... (sorted by
  name) calibrate, files 2, 4, ... test. Clean pairs are formed within a half only.
* the OLMo 2 ladder run/rerun pairs (held-out and downstream only, no train loss): 190M and 3B
  calibrate, 1B tests.
* runs of other recipes, real differences rather than clean pairs, and single runs: AdamW vs Muon
  and Muon vs its 0.75x schedule at 1.5B, SOAP vs Muon at 124M, and llm.c GPT-2 124M (the one run
  with a grad norm) are test material; the llm.c-format AdamW baseline calibrates.

Everything is read by gapwatch's own importers, as `gapwatch import` reads it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from bench.real_data import REAL_DATA
from monitor.importers import load
from monitor.schema import RunData

DATA = REAL_DATA / "runs"
MODDED = DATA / "modded-nanogpt"
LADDER = DATA / "olmo-wandb-exports" / "ladder"
HALVES = ("calibration", "test")


@dataclass(frozen=True)
class Pair:
    """A run and the reference it is compared with; `clean` when both are one recipe."""

    run: str
    reference: str
    half: str
    family: str
    clean: bool


@functools.cache
def load_run(path: str, name: str) -> RunData:
    return load(path).to_run_data(name)


def repeat_files() -> list[Path]:
    return sorted((MODDED / "valueembed_seeds_2024-12-04").glob("*.txt"))


def repeats(half: str) -> list[RunData]:
    """The repeats of one half, named r01..r13 by their place in sorted order."""
    files = repeat_files()
    chosen = range(0, len(files), 2) if half == "calibration" else range(1, len(files), 2)
    return [load_run(str(files[i]), f"r{i + 1:02d}") for i in chosen]


LADDER_SIZES = {"calibration": ("190M", "3B"), "test": ("1B",)}


def ladder(size: str) -> tuple[RunData, RunData]:
    run = load_run(str(LADDER / f"peteish-moreeval__{size}-1xC.csv"), f"ladder-{size}")
    rerun = load_run(str(LADDER / f"peteish-moreeval__{size}-1xC-rerun.csv"), f"ladder-{size}-rerun")
    return run, rerun


def clean_pairs(half: str) -> list[tuple[RunData, RunData, str]]:
    """(run, reference, family) for every ordered clean pair of one half."""
    out = []
    rs = repeats(half)
    for a in rs:
        for b in rs:
            if a is not b:
                out.append((a, b, "repeats"))
    for size in LADDER_SIZES[half]:
        run, rerun = ladder(size)
        out += [(run, rerun, "ladder"), (rerun, run, "ladder")]
    return out


def scaleup() -> dict[str, RunData]:
    folder = MODDED / "scaleup1b_2024-10-20"
    names = {"87bd51fd": "adamw-1.5b", "ad8d7ae5": "muon-1.5b", "c0078066": "muon-0.75x-1.5b"}
    return {label: load_run(str(next(folder.glob(f"{stem}*.txt"))), label) for stem, label in names.items()}


def soap_muon() -> tuple[RunData, RunData]:
    folder = MODDED / "soap_vs_muon_2024-10"
    return (load_run(str(next(folder.glob("SOAP_*.txt"))), "soap-124m"),
            load_run(str(next(folder.glob("Muon_*.txt"))), "muon-124m"))


def llmc() -> RunData:
    return load_run(str(MODDED / "llmc_gpt2_124M_2024-10-13" / "main.log"), "llmc-124m")


def adamw_baseline() -> RunData:
    path = next((MODDED / "adamw_baseline_2024-06-06").glob("*.log"))
    return load_run(str(path), "llmc-adamw-baseline")


def single_runs(half: str) -> list[RunData]:
    """Runs judged on their own (spikes, NaN, stalls, grad norm) in one half."""
    if half == "calibration":
        return repeats(half) + [adamw_baseline()]
    return repeats(half) + [llmc()]
