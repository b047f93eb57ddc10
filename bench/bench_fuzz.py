"""Broken and hostile importer inputs: every case must end in a clean error or a faithful import.

The corpus (`bench.fuzz_corpus`, fixed seed) corrupts the real files of `../shared/data/wild` and
small generated logs; each case is imported by `gapwatch import` in a process of its own
(`bench.fuzz_runner`). The promise: 0 tracebacks, 0 crashes, 0 hangs, 0 silent changes.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from bench.fuzz_corpus import corpus, real_files
from bench.fuzz_runner import OUTCOMES, original_oracles, run_cases
from bench.results import record, table

# A case still running after this long is a hang (the largest takes a few seconds).
TIMEOUT_S = 120.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_fuzz")
    parser.add_argument("--quick", action="store_true", help="every 8th case")
    parser.add_argument("--against", type=Path, metavar="TREE",
                        help="also run the corpus with the gapwatch of another source tree (an "
                        "older checkout), side by side")
    args = parser.parse_args(argv)
    started = time.monotonic()
    originals = original_oracles([f.path for f in real_files() if f.fmt == "binary"])
    cases = corpus(originals)
    if args.quick:
        cases = cases[::8]

    def show(done, total, result, seconds):
        if result.outcome not in ("clean error", "imported") or done % 25 == 0:
            print(f"[{done}/{total}] {result.outcome}: {result.case} ({seconds:.1f} s) {result.detail}", flush=True)

    results = run_cases(cases, TIMEOUT_S, progress=show)
    counts = Counter(r.outcome for r in results)
    groups = Counter(_group(r.case) for r in results)
    rows = []
    for group in sorted(groups):
        mine = Counter(r.outcome for r in results if _group(r.case) == group)
        rows.append({"inputs": group, "cases": groups[group],
                     **{o: mine.get(o, 0) for o in OUTCOMES}})
    rows.append({"inputs": "**all**", "cases": len(results), **{o: counts.get(o, 0) for o in OUTCOMES}})
    if args.against is not None:
        older = Counter(r.outcome for r in run_cases(cases, TIMEOUT_S, progress=show, tree=args.against))
        rows.append({"inputs": f"all, with the gapwatch of {args.against.name}", "cases": len(results),
                     **{o: older.get(o, 0) for o in OUTCOMES}})
    bad = [r for r in results if r.outcome not in ("clean error", "imported")]
    body = (f"{len(results)} cases (seed fixed in bench/fuzz_corpus.py), each `gapwatch import` in a forked "
            f"process of its own, {TIMEOUT_S:.0f} s before a case counts as a hang; "
            f"{time.monotonic() - started:.0f} s in all.\n\n" + table(rows) + "\n\n"
            "clean error: exit 2 and one line naming the file; imported: exit 0 and every stored value, "
            "step and name one the input holds (the exact rows for the clean generated files; for "
            ".wandb and TensorBoard files, whose records carry checksums, a subset of the undamaged "
            "file's rows, and fewer rows only with a note).\n")
    if bad:
        body += "\nNot clean:\n\n" + table([{"case": r.case, "outcome": r.outcome, "detail": r.detail} for r in bad])
    record("fuzz", "Importers: broken and hostile inputs", body)


def _group(case: str) -> str:
    """The file a case was made from (its name up to the first space)."""
    return case.split(" ", 1)[0]
