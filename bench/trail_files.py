"""`python bench/trail_files.py`: how many of the project's files one `train/loss` value passes
through, from `Monitor.log` to the dashboard's chart (issue 29 aims at 30 or fewer).

The trail, on a SQLite store: the client logs 300 steps with a NaN at step 200 and closes; the
watch service polls until it has judged every row (detection, incident, alert, console
notification); the dashboard loads the run's page and draws its panels. Every Python function
call in the project's own files (`monitor/`, `app/`), on every thread, is recorded per stage. The
scenario runs twice and only the second pass counts, so imports and one-time caches do not.
"""

from __future__ import annotations

import io
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = tuple(str(REPO / p) + "/" for p in ("monitor", "app"))
STEPS = 300
NAN_AT = 200


def scenario(url: str, record) -> None:
    import math

    from app.dashboard import panels
    from app.dashboard.queries import load_view
    from app.dashboard.routes import ViewSpec
    from monitor.alerting.config import AlertingConfig, SinkConfig
    from monitor.client import Monitor
    from monitor.schema import Severity
    from monitor.store import open_store
    from monitor.watch.config import WatchConfig
    from monitor.watch.service import TargetSpec, WatchService

    with record("client -> store"):
        monitor = Monitor("trail", url)
        for step in range(1, STEPS + 1):
            monitor.log(step, {"train/loss": math.nan if step == NAN_AT else 3.0 + 1.0 / step})
        monitor.close()
    config = WatchConfig(poll_interval_s=0.01, alerting=AlertingConfig(
        sinks=[SinkConfig("console", "console", Severity.INFO)]))
    with open_store(url) as store:
        service = WatchService(store, config, TargetSpec(runs=("trail",)), stream=io.StringIO())
        with record("store -> detector -> alert"):
            while service.poll():
                pass
        assert store.alerts.list("trail"), "the NaN raised no alert"
        with record("store -> chart"):
            panels.build(load_view(store, ViewSpec(run="trail"), 2000, None))


def main() -> None:
    files: dict[str, set[str]] = defaultdict(set)
    stage = {"now": None}

    def profile(frame, event, arg):
        if event == "call" and stage["now"] and frame.f_code.co_filename.startswith(OURS):
            files[stage["now"]].add(frame.f_code.co_filename)

    class record:
        def __init__(self, name: str) -> None:
            self.name = name

        def __enter__(self):
            stage["now"] = self.name if counting["on"] else None

        def __exit__(self, *exc):
            stage["now"] = None

    counting = {"on": False}
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        for on in (False, True):
            counting["on"] = on
            with tempfile.TemporaryDirectory() as tmp:
                scenario(f"sqlite:///{tmp}/trail.db", record)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    every = set().union(*files.values())
    for name, found in files.items():
        print(f"{name}: {len(found)} files")
    print(f"distinct files on the trail: {len(every)}")
    packages = defaultdict(int)
    for path in every:
        packages[str(Path(path).parent.relative_to(REPO))] += 1
    print("by package: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    for path in sorted(every):
        print("  " + str(Path(path).relative_to(REPO)))


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
