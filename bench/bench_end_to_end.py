"""What users wait for, end to end from the store: `gapwatch detect` and `gapwatch report` on a pair
of long runs, today's code against a baseline commit, side by side in one run.

Each code version runs in its own processes (PYTHONPATH = that version's tree; the baseline is
`git archive` of a commit, default the one before the chunked store):
- build: the two `bench_report.synthetic_run` runs written into a fresh SQLite store through
  `Store.write_metrics` in batches of 20,000 steps (the importer's batch size).
- detect / report: the CLI as a user runs it, wall clock and peak RSS (`/usr/bin/time`), REPEATS
  fresh processes each.
- phases: the report's work in one process, timed phase by phase (load both runs, align, the
  detectors on the run against its reference and on the reference alone, tables + charts + HTML),
  with the peak RSS reached by the end of each phase.
- import: `gapwatch import` of a JSONL file of the run (one object a step) and of a CSV file of it
  (one row a step, a column a metric), wall and peak RSS. `--import-only` measures just these.
- ingest: bench_store's ingest (ours vs the raw driver, SQLite and PostgreSQL), and the
  point-budget read of a 1.41M-step series, each version's own.

`--wide` measures this tree alone on a pair as wide as real runs (bench/wide_pair.py: 10 dense
series, 11 held-out sets, 40 downstream tasks with stderr, 101 series): `pandas.read_csv` of the
same data, then `gapwatch import` of each run's JSONL, of one run's `step`-header CSV and of that
CSV as a W&B `_step` history export, `detect`,
`report`, and the run page's server work (ordering the tasks, reading the view, drawing the
panels), each in fresh processes in the same run, so every figure stands beside read_csv's.
`--pair-dir DIR` keeps the pair's files in DIR and reuses them (writing them takes minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.results import record, table

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "a034684"  # the row table only: every (step, metric) one row
# What each baseline commit measured here was, for the table's caption.
BASELINE_NOTES = {
    "a034684": "every (step, metric) a row",
    "e6df8d6": "the chunked store; the report aligned the pair twice and built row-major frames",
}
BATCH_STEPS = 20_000
# A 1.41M-step pair takes minutes under the baseline on 2 shared cores.
TIMEOUT_S = 1800
# Fresh processes per command: the wall clock of one varies by a fifth on a shared VM (first-touch
# page faults, huge-page compaction), so the table gives the median and the range.
REPEATS = 3

BUILD = """
import sys, time, numpy as np, pandas as pd
from bench.bench_report import synthetic_run
from monitor.store import open_store
url, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
started = time.perf_counter()
with open_store(url) as store:
    for name, seed, shift, reference in (("ref", 2, 0.0, None), ("cand", 1, -0.1, "ref")):
        wide = synthetic_run(name, steps, seed=seed, shift=shift).scalars
        store.ensure_run(name, tokens_per_step=4096.0, reference=reference,
                         config={"num_devices": 8, "global_batch_size": 8})
        for lo in range(0, len(wide), batch):
            # Only what was logged: the sparse eval metrics are NaN between evaluations.
            part = wide.iloc[lo:lo + batch].stack().dropna().rename("value").reset_index()
            part.columns = ["step", "key", "value"]
            store.write_metrics(name, part)
        del wide
print(time.perf_counter() - started)
"""

PHASES = """
import json, resource, sys, time
from app.report import build_report, compare, render_html
from monitor.store import open_store

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

out, started = [], [time.perf_counter()]
def phase(name):
    now = time.perf_counter()
    out.append({"phase": name, "s": now - started[0], "peak MB": peak_mb()})
    started[0] = now

def progress(message):
    # compare() announces "aligning ..." and then "judging ...": the phases' boundaries.
    if message.startswith("judging") and len(out) == 1:
        phase("align the pair (baseline: for the tables only)")

with open_store(sys.argv[1], read_only=True) as store:
    run, ref = store.load_run("cand"), store.load_run("ref")
phase("load both runs")
pair = compare(run, ref, progress=progress)
phase("detectors: run against reference (baseline: aligning it again), reference alone")
html = render_html(build_report(pair))
phase("tables, charts, HTML")
print(json.dumps(out))
"""

LOGS = """
import json, sys
from bench.bench_report import synthetic_run
wide = synthetic_run("cand", int(sys.argv[3]), seed=1, shift=-0.1).scalars
with open(sys.argv[1], "w") as f:
    cols = list(wide.columns)
    for step, row in zip(wide.index.tolist(), wide.to_numpy().tolist()):
        obj = {"step": step}
        obj.update((k, v) for k, v in zip(cols, row) if v == v)
        f.write(json.dumps(obj) + "\\n")
wide.to_csv(sys.argv[2], index_label="step")
"""

INGEST = """
import json, sys
from bench.bench_store import bench_ingest, bench_read
print(json.dumps({"ingest": bench_ingest(int(sys.argv[1]), 1000), "read": bench_read(int(sys.argv[2]))}))
"""


READ_CSV = """
import sys, pandas as pd
for path in sys.argv[1:]:
    pd.read_csv(path)
"""

READ_JSONL = """
import sys, pandas as pd
pd.read_json(sys.argv[1], lines=True)
"""

# The run page's server work as the route and render callbacks do it; CPU seconds (wall clock on
# a shared machine says more about the neighbours) and resident memory added, median of 3 opens.
RUN_PAGE = """
import json, sys, time
from monitor.store import open_store
from app.dashboard import panels, queries
from app.dashboard.routes import ViewSpec

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6

with open_store(sys.argv[1], read_only=True) as store:
    queries.overview(store)
    base, opens = rss_mb(), []
    for _ in range(3):
        started = time.process_time()
        tasks = queries.downstream_tasks(store, "cand", "ref")
        view = queries.load_view(store, ViewSpec(run="cand", reference="ref"), 2000, None)
        panels.build(view, tasks)
        opens.append(time.process_time() - started)
print(json.dumps({"cpu s": sorted(opens)[1], "added MB": rss_mb() - base}))
"""


def python(tree: Path, code: str, *args, timed: bool = False) -> tuple[str, float | None, float | None]:
    """Run `code` with `tree` on the path; return its stdout and, if timed, wall s and peak MB."""
    cmd = [sys.executable, "-c", code, *map(str, args)]
    return _run(tree, cmd, timed)


def cli(tree: Path, *args) -> tuple[str, float, float]:
    return _run(tree, [sys.executable, "-m", "app", *map(str, args)], timed=True)


def cli_repeated(tree: Path, *args) -> tuple[float, float, float, float]:
    """(median wall s, largest peak MB, fastest s, slowest s) of REPEATS runs of a command."""
    runs = [cli(tree, *args)[1:] for _ in range(REPEATS)]
    walls = sorted(w for w, _ in runs)
    return walls[len(walls) // 2], max(mb for _, mb in runs), walls[0], walls[-1]


def _run(tree: Path, cmd: list[str], timed: bool):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        if timed:
            cmd = ["/usr/bin/time", "-o", t.name, "-f", "%e %M", *cmd]
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:6])}... failed:\n{done.stderr[-3000:]}")
        if not timed:
            return done.stdout, None, None
        wall, rss_kb = t.read().split()[-2:]
    return done.stdout, float(wall), float(rss_kb) / 1024


def baseline_tree(commit: str, into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(label: str, tree: Path, work: Path, steps: int, logs: tuple[Path, Path], ingest_steps: int,
            read_steps: int) -> dict:
    print(f"{label}: building the store", flush=True)
    url = f"sqlite:///{work}/{label}.db"
    build_s = float(python(tree, BUILD, url, steps, BATCH_STEPS)[0].split()[-1])
    print(f"{label}: detect", flush=True)
    detect = cli_repeated(tree, "detect", "--store", url, "--run", "cand", "--reference", "ref")
    print(f"{label}: report", flush=True)
    report = cli_repeated(tree, "report", "--store", url, "--run", "cand", "--reference", "ref",
                          "-o", work / f"{label}.html")
    print(f"{label}: phases", flush=True)
    phases = json.loads(python(tree, PHASES, url)[0].strip().splitlines()[-1])
    imports = measure_import(label, tree, work, logs)
    print(f"{label}: ingest and point-budget read", flush=True)
    store = json.loads(python(tree, INGEST, ingest_steps, read_steps)[0].strip().splitlines()[-1])
    db_mb = (work / f"{label}.db").stat().st_size / 1e6
    return {"build s": build_s, "db MB": db_mb, "detect": detect, "report": report,
            "phases": phases, **imports, "store": store}


def measure_import(label: str, tree: Path, work: Path, logs: tuple[Path, Path]) -> dict:
    """`gapwatch import` of the JSONL and the CSV log into fresh stores: (wall s, peak MB) each."""
    out = {}
    for what, log in zip(("import", "import csv"), logs):
        print(f"{label}: {what}", flush=True)
        _, wall_s, peak_mb = cli(tree, "import", log, "--store", f"sqlite:///{work}/{label}-{log.suffix[1:]}.db",
                                 "--run", "imported")
        out[what] = (wall_s, peak_mb)
    return out


def measure_wide(steps: int, pair_dir: Path | None = None) -> dict:
    """The wide pair (module docstring), this tree only: (wall s, peak MB) of each command. With
    `pair_dir`, the pair's files are kept there and reused when a run of as many steps left them
    (writing them takes minutes); the stores are made afresh either way."""
    from bench.wide_pair import RUNS, write_pair

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        where = pair_dir or work
        files = {name: (where / f"{name}.jsonl", where / f"{name}.csv") for name, _, _ in RUNS}
        stamp = where / "steps"
        if pair_dir is None or not stamp.exists() or stamp.read_text().strip() != str(steps) or \
                not all(f.exists() for pair in files.values() for f in pair):
            print(f"writing a {steps:,}-step wide pair", flush=True)
            files = write_pair(where, steps)
            stamp.write_text(str(steps))
        out: dict = {"csv MB": files["cand"][1].stat().st_size / 1e6,
                     "jsonl MB": files["cand"][0].stat().st_size / 1e6, "load": [os.getloadavg()[0]]}
        print("read_csv", flush=True)
        # The fastest of three: read_csv's time moves a lot from one run to the next (most of the
        # spread is the kernel handing it its memory), and a slow yardstick would flatter us.
        out["read_csv one"] = min(python(ROOT, READ_CSV, files["cand"][1], timed=True)[1:] for _ in range(3))
        out["read_csv pair"] = min(python(ROOT, READ_CSV, files["cand"][1], files["ref"][1], timed=True)[1:]
                                   for _ in range(3))
        print("read_json", flush=True)  # once: it takes several times read_csv's time and memory
        out["read_json one"] = python(ROOT, READ_JSONL, files["cand"][0], timed=True)[1:]
        url = f"sqlite:///{work}/wide.db"
        for name in ("ref", "cand"):
            print(f"import {name}.jsonl", flush=True)
            out[f"import {name}"] = cli(ROOT, "import", files[name][0], "--store", url, "--run", name)[1:]
        print("import cand.csv", flush=True)
        out["import csv"] = cli(ROOT, "import", files["cand"][1], "--store", f"sqlite:///{work}/csv.db",
                                "--run", "cand")[1:]
        export = wandb_export(files["cand"][1], work / "cand-wandb.csv")
        print("import cand-wandb.csv", flush=True)
        out["import wandb csv"] = cli(ROOT, "import", export, "--store", f"sqlite:///{work}/wandb.db",
                                      "--run", "cand")[1:]
        print("detect", flush=True)
        out["detect"] = cli(ROOT, "detect", "--store", url, "--run", "cand", "--reference", "ref", "--no-write")[1:]
        print("report", flush=True)
        out["report"] = cli(ROOT, "report", "--store", url, "--run", "cand", "--reference", "ref",
                            "-o", work / "report.html")[1:]
        print("run page", flush=True)
        out["run page"] = json.loads(python(ROOT, RUN_PAGE, url)[0].strip().splitlines()[-1])
    out["load"].append(os.getloadavg()[0])
    return out


def wandb_export(csv: Path, out: Path) -> Path:
    """The run's CSV as a W&B history export: the same columns under a `_step` header."""
    with open(csv) as src, open(out, "w") as dst:
        header = src.readline()
        dst.write("_step" + header[len("step"):])
        while block := src.read(1 << 24):
            dst.write(block)
    return out


def write_wide_results(r: dict, steps: int) -> None:
    one_s, one_mb = r["read_csv one"]
    pair_s, pair_mb = r["read_csv pair"]
    json_s, _ = r["read_json one"]
    rows = []
    for what, label, base_s, base_mb, base_label in (
            ("import ref", f"`gapwatch import` of a run's JSONL ({r['jsonl MB']:.0f} MB)", one_s, one_mb, "one run"),
            ("import cand", f"`gapwatch import` of the other run's JSONL ({r['jsonl MB']:.0f} MB)", one_s, one_mb,
             "one run"),
            ("import csv", f"`gapwatch import` of a run's `step` CSV ({r['csv MB']:.0f} MB)", one_s, one_mb, "one run"),
            ("import wandb csv", "`gapwatch import` of the same CSV as a W&B `_step` history export", one_s,
             one_mb, "one run"),
            ("detect", "`gapwatch detect` (the pair)", pair_s, pair_mb, "the pair"),
            ("report", "`gapwatch report` (the pair)", pair_s, pair_mb, "the pair")):
        wall, peak = r[what]
        # pandas reading the very file the command reads: read_json for a JSONL, read_csv otherwise.
        own_s = json_s if what in ("import ref", "import cand") else base_s
        rows.append({"command": label, "s": f"**{wall:.1f}**", "peak MB": f"**{peak:,.0f}**",
                     "read_csv of the same data": f"{base_label}: {base_s:.1f} s, {base_mb:,.0f} MB",
                     "x read_csv (time)": f"{wall / base_s:.1f}x",
                     "x pandas reading the same file": f"{wall / own_s:.1f}x"})
    page = r["run page"]
    record(
        "end_to_end_wide",
        f"End to end at realistic width: two {steps:,}-step runs of 101 series",
        "This tree only. `bench/wide_pair.py`: 10 series every step, 11 held-out sets every 1,000 "
        "steps, 40 downstream tasks with their stderr every 2,500 (101 series), a token count growing "
        "by 3,000-4,096 a step; written as JSONL, as a CSV with a `step` header and as the same CSV "
        "under W&B's `_step` header (a history export). Each command one fresh process, wall clock and peak RSS from "
        "`/usr/bin/time`, beside `pandas.read_csv` of the same CSV data measured in the same run "
        "(a fresh process each, the fastest of three), and of pandas reading the very file each command "
        f"reads (for a JSONL, `pandas.read_json(lines=True)`: {r['read_json one'][0]:.1f} s and "
        f"{r['read_json one'][1]:,.0f} MB, run once). Goals: detect and report < 10 s and < 1 GB; import <= 5x read_csv and <= 400 MB. "
        f"Load average at the start and the end: {r['load'][0]:.1f} and {r['load'][-1]:.1f} on "
        f"{os.cpu_count()} cores: wall clocks grow with the neighbours' work, the ratios to read_csv "
        "are measured under the same load.\n\n"
        + table(rows)
        + f"\n\nThe run page's server work per open (order the tasks from point-budgeted reads, read "
        f"the view, draw the panels; `gapwatch dashboard`'s route and render callbacks): "
        f"**{page['cpu s']:.2f} CPU s** (median of 3 opens; CPU time, since the wall clock on a "
        f"shared machine measures its neighbours) and **{page['added MB']:,.0f} MB** resident memory "
        f"added after the first open. Goals: <= 1 s and <= 300 MB added.",
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_end_to_end")
    parser.add_argument("--steps", type=int, default=1_410_000)
    parser.add_argument("--quick", action="store_true", help="100k steps; smaller ingest and read runs")
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against")
    parser.add_argument("--no-record", action="store_true", help="print only; leave RESULTS.md alone")
    parser.add_argument("--import-only", action="store_true",
                        help="only `gapwatch import` of the JSONL and CSV logs; print, record nothing")
    parser.add_argument("--wide", action="store_true",
                        help="this tree on a pair of 101 series (bench/wide_pair.py), beside read_csv")
    parser.add_argument("--pair-dir", type=Path, default=None,
                        help="--wide: keep the pair's files here and reuse them on the next run")
    args = parser.parse_args(argv)
    if args.wide:
        steps = 100_000 if args.quick else args.steps
        wide = measure_wide(steps, args.pair_dir)
        print(json.dumps(wide, indent=1))
        if not args.no_record:
            write_wide_results(wide, steps)
        return
    ingest_steps, read_steps = 100_000, 1_410_000
    if args.quick:
        args.steps, ingest_steps, read_steps = 100_000, 20_000, 200_000
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        logs = (work / "run.jsonl", work / "run.csv")
        print(f"writing a {args.steps:,}-step JSONL and CSV", flush=True)
        python(ROOT, LOGS, *logs, args.steps)
        base = baseline_tree(args.baseline, work / "baseline")
        if args.import_only:
            results = {label: measure_import(label, tree, work, logs)
                       for label, tree in (("baseline", base), ("ours", ROOT))}
        else:
            results = {"baseline": measure("baseline", base, work, args.steps, logs, ingest_steps, read_steps),
                       "ours": measure("ours", ROOT, work, args.steps, logs, ingest_steps, read_steps)}
        results["jsonl MB"] = logs[0].stat().st_size / 1e6
        results["csv MB"] = logs[1].stat().st_size / 1e6
    print(json.dumps(results, indent=1))
    if not args.no_record and not args.import_only:
        write_results(results, args.steps, args.baseline)


def write_results(results: dict, steps: int, baseline: str) -> None:
    b, o = results["baseline"], results["ours"]
    users = [
        {"command": f"`gapwatch {cmd}`", "baseline s": f"{b[cmd][0]:.1f} ({b[cmd][2]:.1f}-{b[cmd][3]:.1f})",
         "ours s": f"**{o[cmd][0]:.1f}** ({o[cmd][2]:.1f}-{o[cmd][3]:.1f})",
         "speed-up": f"{b[cmd][0] / o[cmd][0]:.1f}x", "baseline peak MB": f"{b[cmd][1]:,.0f}",
         "ours peak MB": f"**{o[cmd][1]:,.0f}**"}
        for cmd in ("detect", "report")
    ]
    for what, kind in (("import", "jsonl"), ("import csv", "csv")):
        users.append({"command": f"`gapwatch import` ({results[f'{kind} MB']:.0f} MB {kind.upper()})",
                      "baseline s": f"{b[what][0]:.1f}", "ours s": f"**{o[what][0]:.1f}**",
                      "speed-up": f"{b[what][0] / o[what][0]:.1f}x", "baseline peak MB": f"{b[what][1]:,.0f}",
                      "ours peak MB": f"**{o[what][1]:,.0f}**"})
    phases = [
        {"phase": pb["phase"], "baseline s": f"{pb['s']:.1f}", "ours s": f"{po['s']:.1f}",
         "baseline peak MB so far": f"{pb['peak MB']:,.0f}", "ours peak MB so far": f"{po['peak MB']:,.0f}"}
        for pb, po in zip(b["phases"], o["phases"])
    ]
    store_rows = [
        {"": "write the pair (build)", "baseline": f"{b['build s']:.1f} s", "ours": f"{o['build s']:.1f} s"},
        {"": "SQLite file", "baseline": f"{b['db MB']:,.0f} MB", "ours": f"{o['db MB']:,.0f} MB"},
    ]
    for i, backend in enumerate(("SQLite", "PostgreSQL")):
        store_rows.append({"": f"ingest vs raw driver, {backend} (goal >= 50%)",
                           "baseline": b["store"]["ingest"][i]["ours / raw"],
                           "ours": o["store"]["ingest"][i]["ours / raw"]})
    store_rows.append({"": f"point-budget read, 2,000 of {o['store']['read']['steps']} points (goal < 100 ms)",
                       "baseline": b["store"]["read"]["read_scalars (median of 5)"],
                       "ours": o["store"]["read"]["read_scalars (median of 5)"]})
    record(
        "end_to_end",
        f"End to end from the store: two {steps:,}-step runs",
        f"Baseline = commit {baseline}{f' ({BASELINE_NOTES[baseline]})' if baseline in BASELINE_NOTES else ''}; "
        "ours = this tree. Two "
        "`bench_report.synthetic_run` runs (10 metrics every step, held-out every 1,000 steps, 3 "
        "downstream tasks every 5,000) in a SQLite store; each command a fresh process, wall clock "
        f"and peak RSS from `/usr/bin/time`; detect and report: the median of {REPEATS} runs (fastest-slowest) "
        "and the largest peak. Goals: detect and report < 10 s and < 1 GB; import < 300 MB.\n\n"
        + table(users)
        + "\n\nThe report's work phase by phase in one process (peak RSS reached by the end of each phase):\n\n"
        + table(phases)
        + "\n\nThe store:\n\n" + table(store_rows),
    )


if __name__ == "__main__":
    main()
