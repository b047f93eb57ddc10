"""Importing a wide W&B history export (`_step` and 100 metric columns), side by side with parsing it.

The file is shaped like an OLMo run's W&B export: 10 metrics every step, 12 held-out losses every
1,000 steps, 39 downstream tasks with their stderr every 5,000 steps, and `_timestamp`/`_runtime`.
Each command runs in a fresh process under `/usr/bin/time` (wall clock and peak RSS):

- `pandas.read_csv` of the file (the parse alone, the yardstick of issue 27: <= 5x its time);
- `gapwatch import` of it into a new SQLite store (streamed block by block);
- the same import through the whole-file reader it took before (`load` then `write_run`);
- with `--baseline COMMIT`, the import by that commit's tree, for a before and after.

    python -m bench.bench_wide_export [--steps N] [--baseline COMMIT] [--no-whole]

With `--parquet`, the same history saved by pandas' `to_parquet` (its default row groups) is
imported beside the CSV instead, against `pandas.read_parquet`: a section of its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.bench_end_to_end import baseline_tree
from bench.results import record, table

STEPS = 300_000
ROOT = Path(__file__).resolve().parent.parent
DENSE = [f"train/m{i}" for i in range(9)] + ["train/loss"]
HELDOUT = [f"eval/set{i}/CrossEntropyLoss" for i in range(12)]
TASKS = [f"eval/downstream/task{i}_acc" for i in range(39)]
STDERR = [f"{t}_stderr" for t in TASKS]


def write_export(path: Path, steps: int) -> int:
    """The export, written a block of rows at a time; its column count."""
    columns = ["_step", *DENSE, *HELDOUT, *TASKS, *STDERR, "_timestamp", "_runtime"]
    rng = np.random.default_rng(0)
    with open(path, "w") as fh:
        fh.write(",".join(columns) + "\n")
        for lo in range(0, steps, 50_000):
            s = np.arange(lo, min(lo + 50_000, steps))
            cells = [s.astype(str)]
            cells += [np.char.mod("%.6f", 3 + rng.random(len(s))) for _ in DENSE]
            for group, every in ((HELDOUT, 1000), (TASKS, 5000), (STDERR, 5000)):
                for _ in group:
                    col = np.char.mod("%.6f", rng.random(len(s))).astype(object)
                    col[s % every != 0] = ""
                    cells.append(col)
            cells += [np.char.mod("%.3f", 1.7e9 + s), s.astype(str)]
            fh.write("\n".join(",".join(row) for row in zip(*cells)) + "\n")
    return len(columns)


def timed(code: str, tree: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of `python -c code` in a fresh process, with `tree` (default:
    this one) first on the path."""
    with tempfile.NamedTemporaryFile("r") as t:
        subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%e %M", sys.executable, "-c", code],
                       check=True, env={**os.environ, "PYTHONPATH": str(tree or ROOT)}, cwd=tree or ROOT)
        wall, kb = t.read().split()[-2:]
    return float(wall), float(kb) / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_wide_export")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--baseline", help="also import with this commit's tree (e.g. the one "
                                           "before a change), in the same run")
    parser.add_argument("--no-whole", action="store_true",
                        help="leave out the whole-file reader (gigabytes at 1.41M steps)")
    parser.add_argument("--quick", action="store_true", help="a 30,000-step export")
    parser.add_argument("--parquet", action="store_true", help="the history as Parquet beside the CSV")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = 30_000
    if args.parquet:
        return parquet(args.steps)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wide_export.csv"
        width = write_export(path, args.steps)
        size = path.stat().st_size / 1e6
        streamed = ("from monitor.importers import import_source; from monitor.store import open_store;"
                    f"s = open_store('sqlite:///{tmp}/{{db}}.db'); import_source(s, 'a', {str(path)!r});"
                    "s.close()")
        cases = {
            "pandas.read_csv": (f"import pandas; pandas.read_csv({str(path)!r})", None),
            "gapwatch import (streamed)": (streamed.format(db="a"), None),
        }
        if args.baseline:
            tree = baseline_tree(args.baseline, Path(tmp) / "baseline")
            cases[f"gapwatch import at {args.baseline}"] = (streamed.format(db="c"), tree)
        if not args.no_whole:
            cases["whole file, then written (before)"] = (
                "from monitor.importers import load; from monitor.store import open_store;"
                "from monitor.importers.store_writer import write_run;"
                f"s = open_store('sqlite:///{tmp}/b.db'); write_run(s, 'b', load({str(path)!r}));"
                "s.close()", None)
        got = {name: timed(code, tree) for name, (code, tree) in cases.items()}
        load_end = os.getloadavg()[0]
    base = got["pandas.read_csv"][0]
    rows = [{"": name, "wall s": f"{wall:.1f}", "x read_csv": f"{wall / base:.1f}",
             "peak MB": f"{mb:.0f}"} for name, (wall, mb) in got.items()]
    body = (f"A W&B history export of {args.steps:,} steps x {width} columns ({size:.0f} MB), each "
            "command a fresh process under `/usr/bin/time`, side by side in one run. Goal (issue 27): "
            f"import <= 5x `pandas.read_csv`, <= 400 MB peak. Load average at the start and the end: "
            f"{load:.1f} and {load_end:.1f} on {os.cpu_count()} cores (other sessions' work): wall "
            "clocks grow with it, the ratios are measured under the same load.\n\n" + table(rows))
    record("wide_export", "Importing a wide W&B history export", body)


def parquet(steps: int) -> None:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        csv_path, path = Path(tmp) / "history.csv", Path(tmp) / "history.parquet"
        width = write_export(csv_path, steps)
        import pandas as pd
        import pyarrow.parquet as pq

        pd.read_csv(csv_path).to_parquet(path)
        groups = pq.ParquetFile(path).metadata.num_row_groups
        size = path.stat().st_size / 1e6
        imported = ("from monitor.importers import import_source; from monitor.store import open_store;"
                    f"s = open_store('sqlite:///{tmp}/{{db}}.db'); import_source(s, 'a', {{path!r}}); s.close()")
        cases = {
            "pandas.read_parquet": f"import pandas; pandas.read_parquet({str(path)!r})",
            "gapwatch import (Parquet)": imported.format(db="p", path=str(path)),
            "gapwatch import (the same history as CSV)": imported.format(db="c", path=str(csv_path)),
        }
        got = {name: timed(code) for name, code in cases.items()}
        load_end = os.getloadavg()[0]
    base = got["pandas.read_parquet"][0]
    rows = [{"": name, "wall s": f"{wall:.1f}", "x read_parquet": f"{wall / base:.1f}", "peak MB": f"{mb:.0f}"}
            for name, (wall, mb) in got.items()]
    body = (f"The history of \"Importing a wide W&B history export\" ({steps:,} steps x {width} columns) saved by pandas' `to_parquet` "
            f"({size:.0f} MB, {groups} row group(s), pyarrow's default size), each command a fresh process under "
            f"`/usr/bin/time`, side by side in one run. The import reads a batch of rows at a time, but Parquet is "
            f"decoded a row group at a time: its peak grows with the row group its writer chose. Load average at the "
            f"start and the end: {load:.1f} and {load_end:.1f} on {os.cpu_count()} cores.\n\n" + table(rows))
    record("wide_parquet", "Importing a wide W&B history saved as Parquet", body)


if __name__ == "__main__":
    main()
