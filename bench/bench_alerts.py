"""The watch service: how fast a bad step reaches Slack, and what watching costs.

- Latency: a `gapwatch watch` process at its default poll interval (1 s), every detector on, follows
  a run of N steps with its reference; a NaN is logged; the time from the write's commit to the
  Slack webhook request arriving at a local HTTP server. Between trials the run goes clean until
  the incident resolves and past its cooldown, so that each NaN opens an incident of its own.
  Goal: < 2 s.
- Per-poll cost: our incremental poll (only the new rows, detector state carried over) vs the naive
  way (load the whole run and its reference, align them, run every detector over all of it),
  on the same store, side by side.
- Idle CPU: CPU seconds per second of the watch process while nothing arrives, vs the naive
  watcher, which spends one full pass of CPU every poll whether anything arrived or not.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd

from bench.results import record, table
from monitor.alerting.config import IncidentConfig

REPO = Path(__file__).resolve().parents[1]
KEYS = ("train/loss", "train/grad_norm", "perf/tokens_per_s")
CONFIG = """
sinks:
  - {name: slack, kind: slack, min_severity: info, burst: 100}
"""
# Longest wait for the service to do any one thing (catch up, deliver, stop).
WAIT_S = 300.0
# Clean steps between two trials: the incident resolves after its window, and a recurrence within
# the cooldown after that would open no new incident.
CLEAN_BETWEEN = IncidentConfig().resolve_after_steps + IncidentConfig().cooldown_steps + 50
# The metric each trial's NaN is logged on; between trials it is logged clean every step, which is
# the evidence that resolves the incident.
PROBE = "perf/bench_probe"


class Recorder:
    """A Slack stand-in on 127.0.0.1 that notes when each request arrives."""

    def __init__(self) -> None:
        arrivals = self.arrivals = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                arrivals.append(time.time())
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T0/B0/benchsecret"


def frame(lo: int, hi: int, seed: int, extra: dict[str, float] | None = None) -> pd.DataFrame:
    steps = np.arange(lo, hi)
    rng = np.random.default_rng(seed + lo)
    values = {
        "train/loss": 2.5 + 3 * np.exp(-steps / 5000) + 0.02 * rng.standard_normal(len(steps)),
        "train/grad_norm": 1 + 0.05 * rng.standard_normal(len(steps)),
        "perf/tokens_per_s": 30000 + 300 * rng.standard_normal(len(steps)),
    }
    parts = [pd.DataFrame({"step": steps, "key": k, "value": v}) for k, v in values.items()]
    for key, value in (extra or {}).items():
        parts.append(pd.DataFrame({"step": [hi - 1], "key": key, "value": value}))
    return pd.concat(parts, ignore_index=True)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(pid: int, seconds: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


def wait(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def naive_pass(store, registry) -> None:
    from monitor.judging.align import align_pair

    run, ref = store.load_run("bench"), store.load_run("ref")
    _, aligned = align_pair(run, ref)
    for detector in registry.build():
        detector.detect(run, aligned)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_alerts")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    from monitor import detectors as registry
    from monitor.store import open_store
    from monitor.judging.engine import DetectionEngine
    from monitor.watch.run_watcher import RunWatcher

    n_steps, trials, idle_s = (20_000, 5, 5.0) if args.quick else (50_000, 12, 10.0)
    tmp = Path(tempfile.mkdtemp(prefix="bench_alerts_"))
    url = f"sqlite:///{tmp / 'store.db'}"
    store = open_store(url)
    store.ensure_run("ref", status="imported")
    store.ensure_run("bench", reference="ref")
    for lo in range(0, n_steps, 50_000):
        store.write_metrics("ref", frame(lo, min(n_steps, lo + 50_000), seed=1))
        store.write_metrics("bench", frame(lo, min(n_steps, lo + 50_000), seed=2))
    (tmp / "watch.yaml").write_text(CONFIG)
    receiver = Recorder()
    env = {**os.environ, "SLACK_WEBHOOK_URL": receiver.url}
    with open(tmp / "watch.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app", "watch", "--run", "bench", "--store", url,
                                 "--config", str(tmp / "watch.yaml")], cwd=REPO, env=env, stdout=log, stderr=log)
    try:
        started = time.monotonic()
        print(f"watch service catching up on {n_steps:,} steps ...", flush=True)

        def caught_up() -> bool:
            state = store.load_state("watch/bench")
            return bool(state) and state["cursor"]["key_last"].get("train/loss") == n_steps - 1
        wait(caught_up, "the service to catch up")
        catch_up_s = time.monotonic() - started
        time.sleep(2.0)
        ours_idle = idle_cpu(proc.pid, idle_s)
        print(f"idle CPU measured; {trials} latency trials ...", flush=True)
        latencies, last = [], n_steps
        load_before = os.getloadavg()[0]
        rng = np.random.default_rng(0)
        for i in range(trials):
            if i:
                # One problem, one incident: the last NaN's incident resolves once the run has gone
                # clean for its window, and a NaN after the cooldown opens a new one, which is told.
                before = len(receiver.arrivals)
                clean = frame(last, last + CLEAN_BETWEEN, seed=2)
                probe = pd.DataFrame({"step": np.arange(last, last + CLEAN_BETWEEN), "key": PROBE, "value": 1.0})
                store.write_metrics("bench", pd.concat([clean, probe], ignore_index=True))
                last += CLEAN_BETWEEN
                wait(lambda: len(receiver.arrivals) > before, "the incident to resolve")
            time.sleep(float(rng.uniform(0.5, 1.5)))  # land anywhere in the poll cycle
            before = len(receiver.arrivals)
            store.write_metrics("bench", frame(last, last + 10, seed=2, extra={PROBE: float("nan")}))
            written = time.time()
            last += 10
            wait(lambda: len(receiver.arrivals) > before, "the alert to arrive")
            latencies.append(receiver.arrivals[before] - written)
        load = (load_before + os.getloadavg()[0]) / 2
        proc.send_signal(signal.SIGTERM)
        proc.wait(WAIT_S)

        # Per-poll cost, in this process, on the state the service saved. CPU time, not wall time:
        # other work on a shared machine slows the wall clock of both, not what each needs.
        watcher = RunWatcher(store, "bench", "ref", DetectionEngine())
        ours_poll, naive_poll = [], []
        for _ in range(3):
            store.write_metrics("bench", frame(last, last + 10, seed=2))
            last += 10
            t = time.process_time()
            watcher.poll()
            ours_poll.append(time.process_time() - t)
            t = time.process_time()
            naive_pass(store, registry)
            naive_poll.append(time.process_time() - t)
    finally:
        if proc.poll() is None:
            proc.kill()
        store.close()

    lat = sorted(latencies)
    p95 = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
    rows = [
        {"measure": "latency, NaN logged -> Slack request (s)", "ours": f"p50 {statistics.median(lat):.2f}, "
         f"p95 {p95:.2f}, max {lat[-1]:.2f}", "naive": "-", "ratio": "-"},
        {"measure": "one poll with 10 new steps (CPU ms)", "ours": f"{statistics.median(ours_poll) * 1000:.0f}",
         "naive": f"{statistics.median(naive_poll) * 1000:.0f}",
         "ratio": f"{statistics.median(naive_poll) / statistics.median(ours_poll):.0f}x"},
        # Idle, the naive watcher still judges everything every second: its idle load is one pass a second.
        {"measure": "CPU while idle (CPU s per s)", "ours": f"{ours_idle:.3f}",
         "naive": f"{statistics.median(naive_poll):.3f}",
         "ratio": f"{statistics.median(naive_poll) / max(ours_idle, 1e-3):.0f}x"},
    ]
    body = (f"Run of {n_steps:,} steps x {len(KEYS)} metrics with a reference of the same size, all "
            f"{len(registry.REGISTRY)} detectors, SQLite store, default poll interval 1 s, {trials} trials; "
            f"the service caught up on the run in {catch_up_s:.0f} s. Naive = load the whole run and "
            "reference, align, run every detector over all of it, every poll. Poll costs are CPU time "
            "(the machine is shared; wall time varies with the load of others).\n\n"
            f"{table(rows)}\n\nGoal: latency < 2 s at the default poll interval: "
            f"{'met' if lat[-1] < 2.0 else 'NOT met'} (max {lat[-1]:.2f} s), with a load average of "
            f"{load:.1f} on {os.cpu_count()} cores during the trials (other work slows every poll's wall time).")
    record("alerts", "Alerts: latency to Slack and the cost of watching", body)


if __name__ == "__main__":
    main(sys.argv[1:])
