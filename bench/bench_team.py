"""A team's store, shortened: writer processes logging several runs each into one PostgreSQL, watch
workers (`gapwatch watch --all`'s service) judging all of them with a webhook sink, faults injected
into the runs, a `kill -9` of a watch worker and a restart of PostgreSQL in the middle.

Measured for 1 and 2 workers (`--workers 1 2 4` for more): rows lost and duplicated, the watch's
poll time, alert latency per fault (from the log() of the faulty step to the webhook's POST),
notifications per fault, and how long the runs of the killed worker went unwatched (with one
worker a supervisor restarts it at once, as compose's restart policy does; with several the others
take its runs over when its lease ends).

The PostgreSQL is a private cluster (tests/monitor/client/private_postgres.py), so restarting it
touches nobody else's. Runs have no reference (the detectors that need one are left out).
`--idle-runs N` adds N finished runs to the store before the workers start (the team's reference
runs): every worker holds its share of them and looks at them each poll, though nothing arrives.

    python -m bench.bench_team [--quick] [--workers 1 2] [--writers 4] [--runs-per-writer 3] [--rate 20]

The load average of the machine during each scenario is recorded with it: on shared cores a poll
waits for a core as much as it computes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import text

from bench.results import record, table

REPO = Path(__file__).resolve().parents[1]
METRICS = ["train/loss", "train/grad_norm"] + [f"layers/l{i}_grad_norm" for i in range(8)]
LEASE_S = 5.0
POLL_S = 1.0
# (name, seconds after the start, metric, how): the faults every faulty run gets.
FAULTS = [("nan, before the kill", 10.0, "train/loss", "nan"),
          ("grad-norm spike, before the kill", 16.0, "train/grad_norm", "spike"),
          ("nan, after the kill", 25.0, "train/loss", "nan"),
          ("nan, after the PostgreSQL restart", 38.0, "train/loss", "nan")]
# The webhook is a team's ops receiver, not a Slack channel: its rate limit (default 60 a minute in
# bursts of 10, Slack's) is raised so that the faults of many runs at once are not held back by it.
HOOK_RATE = 600
HOOK_BURST = 100
KILL_AT_S = 20.0
PG_RESTART_AT_S = 30.0
PG_DOWN_S = 3.0
WATCH_CONFIG = f"""
poll_interval_s: {POLL_S}
lease_s: {LEASE_S}
detectors: [nonfinite, spike]
incidents: {{resolve_after_steps: 20, cooldown_steps: 50}}
sinks:
  - {{name: hook, kind: webhook, min_severity: info, url: "{{hook}}", rate_per_minute: {HOOK_RATE}, burst: {HOOK_BURST}}}
"""


# --- the worker and writer processes ------------------------------------------------------------
def worker_main(store_url: str, config_path: str, polls_path: str) -> None:
    """The watch service of `gapwatch watch --all`, its poll durations appended to a file."""
    import logging

    from monitor.store import open_store
    from monitor.watch.config import load_config
    from monitor.watch.service import TargetSpec, WatchService

    logging.basicConfig(level=logging.WARNING)
    store = open_store(store_url)
    svc = WatchService(store, load_config(config_path), TargetSpec(all_runs=True))
    out = open(polls_path, "a", buffering=1)
    poll = svc.poll

    def timed() -> int:
        began, cpu = time.perf_counter(), time.process_time()
        queued = poll()
        out.write(f"{time.perf_counter() - began:.4f} {time.process_time() - cpu:.4f} {time.time():.3f}\n")
        return queued

    svc.poll = timed
    signal.signal(signal.SIGTERM, lambda *_: svc.stop())
    svc.run()


def writer_main(store_url: str, runs: list[str], faulty: list[str], steps_per_s: float, seconds: float,
                out_path: str) -> None:
    """Log `runs` at `steps_per_s` for `seconds` from the scenario's start (see _start_writers);
    the faulty ones get FAULTS. Writes what was logged and when each fault's step was logged."""
    from monitor.client import Monitor, MonitorSettings

    rng = np.random.default_rng(abs(hash(runs[0])) % 2**32)
    settings = MonitorSettings(handle_sigterm=False, spool_dir=Path(out_path).parent / "spool")
    monitors = {r: Monitor(r, store=store_url, settings=settings) for r in runs}
    fault_steps = {name: int(at * steps_per_s) for name, at, _, _ in FAULTS}
    logged_at: dict[str, dict[str, float]] = defaultdict(dict)
    ready, go = Path(out_path + ".ready"), Path(out_path + ".go")
    ready.touch()
    while not go.exists():
        time.sleep(0.01)
    began = float(go.read_text())
    step = 0
    while time.time() - began < seconds:
        due = began + step / steps_per_s
        time.sleep(max(0.0, due - time.time()))
        for run, mon in monitors.items():
            values = {k: 2.0 + 3.0 * np.exp(-step / 300) + 0.01 * rng.standard_normal() for k in METRICS}
            values["train/grad_norm"] = 1.0 + 0.05 * rng.standard_normal()
            if run in faulty:
                for name, _, metric, how in FAULTS:
                    if fault_steps[name] <= step < fault_steps[name] + 5:
                        values[metric] = float("nan") if how == "nan" else values[metric] * 20
                        logged_at[run].setdefault(name, time.time())
            mon.log(step, values)
        step += 1
    for mon in monitors.values():
        mon.close()
    Path(out_path).write_text(json.dumps({"steps": step, "rows_per_run": step * len(METRICS),
                                          "fault_steps": fault_steps, "logged_at": logged_at}))


# --- one scenario -------------------------------------------------------------------------------
def spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    with open(log, "a") as out:
        return subprocess.Popen([sys.executable, "-m", "bench.bench_team", *args], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


def idle_runs(store, n: int, steps: int = 2_000) -> None:
    """`n` finished runs of METRICS, `steps` steps each."""
    rng = np.random.default_rng(0)
    for i in range(n):
        name = f"reference-{i}"
        store.ensure_run(name)
        step = np.repeat(np.arange(steps), len(METRICS))
        store.write_metrics(name, pd.DataFrame({"step": step, "key": METRICS * steps,
                                                "value": 2.0 + 0.01 * rng.standard_normal(len(step))}))


def scenario(workers: int, n_writers: int, runs_per_writer: int, steps_per_s: float, seconds: float,
             tmp: Path, n_idle: int = 0) -> dict:
    from monitor.store import open_store
    from tests.monitor.alerting.receiver import Receiver
    from tests.monitor.client.private_postgres import PrivatePostgres

    pg = PrivatePostgres()
    pg.start()
    receiver = Receiver()
    procs: list[subprocess.Popen] = []
    try:
        url = pg.url
        with open_store(url) as store:  # the schema, before anyone races to make it
            idle_runs(store, n_idle)
        config = tmp / "watch.yaml"
        config.write_text(WATCH_CONFIG.replace("{hook}", receiver.url()))
        polls = tmp / "polls.txt"
        watchers = [spawn(["worker", url, str(config), str(polls)], tmp / f"worker{i}.log") for i in range(workers)]
        procs += watchers
        # Writers start once every worker polls: start-up (imports) is not alert latency.
        _wait_for(lambda: polls.exists() and len(polls.read_text().splitlines()) >= 2 * workers, 120.0)
        runs = [[f"w{w}-run{r}" for r in range(runs_per_writer)] for w in range(n_writers)]
        faulty = [rs[0] for rs in runs]  # one faulty run per writer, the rest clean
        writers = [spawn(["writer", url, ",".join(rs), rs[0], str(steps_per_s), str(seconds),
                          str(tmp / f"writer{w}.json")], tmp / f"writer{w}.log") for w, rs in enumerate(runs)]
        procs += writers
        began = _start_writers([tmp / f"writer{w}.json" for w in range(n_writers)])
        loads = []

        time.sleep(max(0.0, began + KILL_AT_S - time.time()))
        loads.append(os.getloadavg()[0])
        victim = watchers[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        killed = time.time()
        if workers == 1:  # a supervisor's restart
            procs.append(spawn(["worker", url, str(config), str(polls)], tmp / "worker-restarted.log"))
        takeover = _wait_takeover(url, victim.pid, len(faulty) * runs_per_writer + n_idle, killed)

        time.sleep(max(0.0, began + PG_RESTART_AT_S - time.time()))
        pg.stop()
        time.sleep(PG_DOWN_S)
        pg.start()

        for w in writers:
            w.wait(seconds + 120)
        ended = time.time()
        loads.append(os.getloadavg()[0])
        time.sleep(10.0)  # the last faults' notifications
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        logged = [json.loads((tmp / f"writer{w}.json").read_text()) for w in range(n_writers)]
        with open_store(url) as store:
            stored = {r: store.count_rows(r) for rs in runs for r in rs}
            with store.engine.connect() as conn:
                queued_at = dict(conn.execute(text("SELECT dedup_key, created_at FROM alert_outbox")).all())
        result = _measure(workers, runs, faulty, logged, stored, receiver, polls, (began, ended), takeover,
                          seconds)
        result["queued"] = _queued_latencies(faulty, logged, receiver, queued_at)
        result["load"] = max(loads)
        result["idle"] = n_idle
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        receiver.close()
        try:
            pg.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(pg.dir, ignore_errors=True)


def _start_writers(outs: list[Path], lead_s: float = 0.5) -> float:
    """Once every writer is ready to log (imports and monitors made), give them one start time,
    the scenario's clock: the faults' times and the kill's and restart's are of one clock."""
    _wait_for(lambda: all(Path(f"{o}.ready").exists() for o in outs), 120.0)
    began = time.time() + lead_s
    for o in outs:  # written whole, then renamed: a writer never reads half of it
        Path(f"{o}.go.part").write_text(f"{began:.6f}")
        os.replace(f"{o}.go.part", f"{o}.go")
    time.sleep(max(0.0, began - time.time()))
    return began


def _wait_for(predicate, limit_s: float) -> None:
    deadline = time.time() + limit_s
    while not predicate() and time.time() < deadline:
        time.sleep(0.1)


def _wait_takeover(url: str, victim_pid: int, n_runs: int, killed: float, limit_s: float = 60.0) -> float | None:
    """Seconds from the kill until live workers other than the victim hold every run."""
    from monitor.store import open_store

    with open_store(url) as store:
        while time.time() - killed < limit_s:
            try:
                held = {n: o for n, o in store.leases.holders().items() if n.startswith("run/")}
            except Exception:  # noqa: BLE001 - the store may be busy; look again
                held = {}
            if len(held) >= n_runs and not any(o.endswith(f":{victim_pid}") for o in held.values()):
                return time.time() - killed
            time.sleep(0.1)
    return None


def _queued_latencies(faulty, logged, receiver, queued_at: dict[str, float]) -> list[float]:
    """Per fault told, seconds from the log() of its step until the watch queued its notification
    (the outbox row's creation): the watch's share of the alert latency, delivery left out."""
    out = []
    posts = [d.body for d in receiver.deliveries() if d.body["kind"] == "opened"]
    for name, _, _, _ in FAULTS:
        for w, run in enumerate(faulty):
            step = logged[w]["fault_steps"][name]
            at = logged[w]["logged_at"].get(run, {}).get(name)
            keys = [b["idempotency_key"] for b in posts if b["run"] == run and step <= b["start_step"] < step + 5]
            times = [queued_at[k] for k in keys if k in queued_at]
            if times and at is not None:
                out.append(min(times) - at)
    return out


def _measure(workers, runs, faulty, logged, stored, receiver, polls: Path, window, takeover, seconds) -> dict:
    all_runs = [r for rs in runs for r in rs]
    expected = {r: logged[w]["rows_per_run"] for w, rs in enumerate(runs) for r in rs}
    lost = sum(max(0, expected[r] - stored[r]) for r in all_runs)
    extra = sum(max(0, stored[r] - expected[r]) for r in all_runs)
    posts = [(d.body, d.at) for d in receiver.deliveries()]
    keys = [b["idempotency_key"] for b, _ in posts]
    duplicates = len(keys) - len(set(keys))
    timed = np.array([[float(x) for x in line.split()] for line in polls.read_text().splitlines() if line.strip()])
    if len(timed):  # the polls that ended while the writers logged (not the idle ones before)
        timed = timed[(timed[:, 2] >= window[0]) & (timed[:, 2] <= window[1])]
    poll_s, poll_cpu_s = (timed[:, 0], timed[:, 1]) if len(timed) else (np.array([np.nan]), np.array([np.nan]))
    per_fault = {}
    every: list[float] = []
    for name, _, _, _ in FAULTS:
        latencies, counts = [], []
        for w, run in enumerate(faulty):
            step = logged[w]["fault_steps"][name]
            at = logged[w]["logged_at"].get(run, {}).get(name)
            # By its first step: an incident is named by its story, which may not be the fault's metric.
            opened = [(b, t) for b, t in posts if b["run"] == run and b["kind"] == "opened"
                      and step <= b["start_step"] < step + 5]
            counts.append(len(opened))
            if opened and at is not None:
                latencies.append(min(t for _, t in opened) - at)
        per_fault[name] = (latencies, counts)
        every += latencies
    false = [b for b, _ in posts if b["kind"] == "opened" and b["run"] not in faulty]
    # What the writers logged, not what they were asked to: a writer short of CPU falls behind its rate.
    return {"workers": workers, "runs": len(all_runs), "rows_per_s": sum(expected.values()) / seconds,
            "lost": lost, "extra": extra, "duplicates": duplicates, "polls": poll_s, "poll_cpu": poll_cpu_s, "takeover": takeover,
            "per_fault": per_fault, "false": len(false), "latencies": every}


# --- the table -----------------------------------------------------------------------------------
def rows_of(result: dict) -> list[dict]:
    polls = result["polls"]
    base = {"workers": result["workers"], "runs (logging + idle)": f"{result['runs']} + {result['idle']}", "rows/s logged": f"{result['rows_per_s']:,.0f}",
            "rows lost": result["lost"], "rows twice": result["extra"], "notifications twice": result["duplicates"],
            "poll p50 / p95 / max s": f"{np.nanmedian(polls):.2f} / {np.nanquantile(polls, 0.95):.2f} / "
                                      f"{np.nanmax(polls):.2f}",
            "poll CPU p50 / p95 s": f"{np.nanmedian(result['poll_cpu']):.2f} / "
                                    f"{np.nanquantile(result['poll_cpu'], 0.95):.2f}",
            "takeover s": "-" if result["takeover"] is None else f"{result['takeover']:.1f}",
            "alert latency p95, all faults s": (f"{np.quantile(result['latencies'], 0.95):.1f}"
                                                if result["latencies"] else "-"),
            "queued p95 s": f"{np.quantile(result['queued'], 0.95):.1f}" if result["queued"] else "-",
            "load average (1 min, max)": f"{result['load']:.1f}",
            "alerts on clean runs": result["false"]}
    out = []
    for name, (latencies, counts) in result["per_fault"].items():
        lat = (f"{np.median(latencies):.1f} / {max(latencies):.1f}" if latencies else "not told")
        out.append({**base, "fault": name, "alert latency median / max s": lat,
                    "notifications per fault": f"{min(counts)}-{max(counts)}" if counts else "-"})
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker_main(*argv[1:4])
    if argv and argv[0] == "writer":
        _, url, runs, faulty, rate, seconds, out = argv
        return writer_main(url, runs.split(","), faulty.split(","), float(rate), float(seconds), out)
    parser = argparse.ArgumentParser(prog="bench_team")
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--writers", type=int, help="writer processes (default 4; --quick 2)")
    parser.add_argument("--runs-per-writer", type=int, default=3)
    parser.add_argument("--idle-runs", type=int, default=0, help="finished runs in the store (references)")
    parser.add_argument("--rate", type=float, help="steps a second of each run (default 20; --quick 10)")
    args = parser.parse_args(argv)
    n_writers, rate = (2, 10.0) if args.quick else (4, 20.0)
    n_writers, rate = args.writers or n_writers, args.rate or rate
    runs_per_writer = args.runs_per_writer
    seconds = 50.0
    out = []
    for workers in args.workers:
        with tempfile.TemporaryDirectory(prefix="gapwatch-team-") as tmp:
            result = scenario(workers, n_writers, runs_per_writer, rate, seconds, Path(tmp), args.idle_runs)
        print(result["workers"], "workers:", rows_of(result)[0], flush=True)
        out += rows_of(result)
    # The default scale keeps its section; another scale gets one of its own next to it.
    default = (n_writers, runs_per_writer, rate, args.idle_runs) == (4, 3, 20.0, 0) and not args.quick
    name = "team" if default else f"team-{n_writers}x{runs_per_writer}-{rate:g}-{args.idle_runs}"
    idle = f" and {args.idle_runs} finished runs" if args.idle_runs else ""
    record(name, f"Team scale, shortened: {n_writers} writer processes x {runs_per_writer} runs{idle}, "
           f"{len(METRICS)} metrics a step, kill -9 of a watch worker and a PostgreSQL restart",
           table(out) + "\n\n"
           f"Each writer process logs its runs at {rate:.0f} steps/s through monitor.client for {seconds:.0f} s; one "
           "run per writer gets the faults (NaN in the loss, a 20x grad-norm spike), the others stay clean. Watch "
           f"workers poll every {POLL_S:.0f} s with {LEASE_S:.0f} s leases (detectors: nonfinite, spike; the runs have "
           f"no reference). At {KILL_AT_S:.0f} s worker 0 is killed with SIGKILL (with one worker a supervisor "
           f"restarts it at once); at {PG_RESTART_AT_S:.0f} s the private PostgreSQL is stopped for {PG_DOWN_S:.0f} s "
           "and started again. Writers start once every worker polls, together and on the scenario's clock (the faults' times and the kill's are of one clock); poll figures are of the polls that ended while the writers logged. Poll CPU is the worker process's (its delivery thread included). Alert latency: from the log() call of the faulty step to the webhook's POST. "
           "Queued: from the log() call of the faulty step until the watch queued the notification in the outbox "
           f"(the watch's share; the webhook's rate limit is {HOOK_RATE} a minute in bursts of {HOOK_BURST}, a "
           "team's ops receiver rather than a Slack channel). "
           "Takeover: from the kill until live workers hold every run again.")


if __name__ == "__main__":
    main()
