"""Incidents as a person on call meets them: per injected fault, what `gapwatch detect` lists for the
whole run, and what the watch service sends when the run arrives in six pieces (notifications by
kind, false resolutions while the fault persists, the name of the incident left open).

Runs: bench/quality/stories.py (a run and its reference of one recipe, evals every 1,000 steps, 20
downstream tasks with their stderr). Then the same faults at the length of the real pair (1.41M
steps), judged whole only: what `gapwatch detect` lists (its engine and grouping, on the run in
memory rather than read back from a store). `python -m bench.bench_stories [--steps N]
[--detect-steps N]`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from app.cli import main as main_cli
from bench.quality import stories
from bench.results import record, table
from monitor.alerting.config import AlertingConfig, SinkConfig
from monitor.alerting.grouping import group, marks_of, progress_from_marks
from monitor.judging.engine import DetectionEngine
from monitor.schema import RunData, Severity
from monitor.store import open_store
from monitor.watch.config import WatchConfig
from monitor.watch.service import TargetSpec, WatchService

PIECES = 6
# (scenario, the incident a person must be left with; None: nothing; persistent: the fault lasts to the end)
CASES = (("memorizing", "memorization", True), ("worse", "divergence", True), ("spike_burst", "instability", False),
         ("clean", None, False))


def long_rows(run: RunData):
    frame = run.scalars.reset_index().melt(id_vars="step", var_name="key", value_name="value")
    return frame[frame["value"].notna()].reset_index(drop=True)


def whole(run: RunData, reference: RunData) -> list:
    result = DetectionEngine().judge(run, reference)
    return group(result.detections, progress_from_marks(run.name, marks_of(run)), cleans=result.cleans)


def live(run: RunData, reference: RunData, folder: Path) -> tuple[Counter, list[dict]]:
    """Notifications the watch service queues (any severity) while the run arrives in PIECES."""
    config = WatchConfig(poll_interval_s=0.01,
                         alerting=AlertingConfig(sinks=[SinkConfig("all", "console", Severity.INFO)]))
    with open_store(f"sqlite:///{folder / (run.name + '.db')}") as store:
        store.ensure_run("reference")
        store.write_metrics("reference", long_rows(reference))
        store.ensure_run(run.name, reference="reference")
        rows = long_rows(run)
        service = WatchService(store, config, TargetSpec(runs=(run.name,)), stream=io.StringIO())
        last = int(rows["step"].max())
        for lo, hi in zip(np.linspace(0, last, PIECES + 1).astype(int)[:-1], np.linspace(0, last, PIECES + 1).astype(int)[1:]):
            store.write_metrics(run.name, rows[(rows["step"] > lo) & (rows["step"] <= hi)])
            while service.poll():
                pass
        sent = Counter(row.kind for row in store.outbox.pending(100_000))
        return sent, store.alerts.list(run.name)


def long_runs(n: int) -> list[dict]:
    """Per fault, the incidents a whole-run judgement of an `n`-step run lists."""
    reference = stories.reference(n)
    rows = []
    for scenario, truth, _ in CASES:
        print(f"{scenario}: judging the whole {n:,}-step run", flush=True)
        listed = whole(getattr(stories, scenario)(n), reference)
        rows.append({"fault": scenario, "detect: incidents": len(listed),
                     "detections in them": sum(i.count for i in listed),
                     "incidents (state)": ", ".join(f"{i.story} ({'resolved' if i.resolved else 'open'})"
                                                    for i in listed) or "none",
                     "truth": truth or "nothing"})
    return rows


def detect_cli(run: RunData, reference: RunData, folder: Path) -> list[dict]:
    """What `gapwatch detect --json` prints for `run`, stored with its reference in a SQLite store."""
    url = f"sqlite:///{folder / (run.name + '-detect.db')}"
    with open_store(url) as store:
        store.ensure_run("reference")
        store.write_metrics("reference", long_rows(reference))
        store.ensure_run(run.name, reference="reference")
        store.write_metrics(run.name, long_rows(run))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main_cli(["detect", "--run", run.name, "--store", url, "--json", "--no-write"])
    return json.loads(out.getvalue())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_stories")
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--detect-steps", type=int, default=1_410_000,
                        help="length of the runs judged whole only (0: skip)")
    parser.add_argument("--quick", action="store_true", help="a 30,000-step run, none judged whole only")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.detect_steps = 30_000, 0
    n = args.steps
    reference = stories.reference(n)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scenario, truth, persistent in CASES:
            print(f"{scenario}: judging the whole run, then watching it in {PIECES} pieces", flush=True)
            run = getattr(stories, scenario)(n)
            listed = whole(run, reference)
            sent, alerts = live(run, reference, Path(tmp))
            still_open = [a for a in alerts if a["state"] == "open"]
            named = ", ".join(sorted({a["story"] for a in still_open})) or "none"
            right = (named == truth) if persistent else (truth is None and not alerts) or (
                truth is not None and {a["story"] for a in alerts} == {truth} and not still_open)
            rows.append({
                "fault": scenario, "detect: incidents": len(listed),
                "opened": sent["opened"], "escalated": sent["escalated"], "updated": sent["updated"],
                "resolved": sent["resolved"],
                "false resolutions": sent["resolved"] if persistent else 0,
                "open at the end": named, "truth": truth or "nothing", "right": "yes" if right else "NO",
            })
    body = (f"{n:,}-step run against its reference (bench/quality/stories.py); the watch service fed "
            f"{PIECES} pieces; notifications counted at every severity (a sink at info).\n\n" + table(rows))
    if args.detect_steps:
        body += (f"\n\nThe same faults on {args.detect_steps:,}-step runs, judged whole as `gapwatch detect` "
                 "judges them (its engine and grouping):\n\n" + table(long_runs(args.detect_steps)))
        print(f"memorizing: `gapwatch detect` on the {args.detect_steps:,}-step run in a store", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            listed = detect_cli(stories.memorizing(args.detect_steps), stories.reference(args.detect_steps), Path(tmp))
        body += (f"\n\nThe seed scenario at {args.detect_steps:,} steps through the command line (`gapwatch detect "
                 f"--json` on a SQLite store): {len(listed)} incident(s): "
                 + (", ".join(f"{i['incident_id']} ({i['state']}, {i['count']} detections)" for i in listed) or "none")
                 + ".")
    record("stories", "Incidents: notifications per injected fault", body)


if __name__ == "__main__":
    main()
