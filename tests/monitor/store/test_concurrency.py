"""One writer process and several reader processes on one SQLite file, at training speed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

WRITER = textwrap.dedent(
    """
    import sys, time, numpy as np, pandas as pd
    from monitor.store import open_store
    url, steps, per_commit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_store(url)
    store.ensure_run("live")
    keys = [f"train/metric_{i}" for i in range(10)]
    started = time.perf_counter()
    for lo in range(0, steps, per_commit):
        batch = np.arange(lo, lo + per_commit)
        store.write_metrics("live", pd.DataFrame({
            "step": np.repeat(batch, len(keys)), "key": keys * len(batch), "value": np.repeat(batch, len(keys)) * 0.1}))
        # Paced at 1,000 steps/s, a fast trainer's rate, so readers meet commits all along.
        time.sleep(max(0.0, (lo + per_commit) / 1000 - (time.perf_counter() - started)))
    print(steps / (time.perf_counter() - started))
    """
)

READER = textwrap.dedent(
    """
    import json, sys, time
    from monitor.store import open_store
    url, seconds = sys.argv[1], float(sys.argv[2])
    errors, polls, last = [], 0, -1
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            store = open_store(url, read_only=True)
            if store.get_run("live") is not None:
                frame = store.read_scalars("live", ["train/metric_0", "train/metric_9"], max_points=500)
                if len(frame):
                    last = max(last, int(frame["step"].max()))
            store.close()
            polls += 1
        except Exception as exc:
            errors.append(str(exc))
    print(json.dumps({"errors": errors[:5], "n_errors": len(errors), "polls": polls, "last": last}))
    """
)


def test_readers_never_see_a_locked_database(sqlite_url):
    from monitor.store import open_store

    open_store(sqlite_url).close()
    steps = 3000
    writer = subprocess.Popen([sys.executable, "-c", WRITER, sqlite_url, str(steps), "50"],
                              stdout=subprocess.PIPE, text=True)
    readers = [
        subprocess.Popen([sys.executable, "-c", READER, sqlite_url, "4"], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    rate = float(writer.communicate(timeout=120)[0])
    results = [json.loads(r.communicate(timeout=120)[0]) for r in readers]
    assert writer.returncode == 0
    print(f"writer: {rate:.0f} steps/s (10 metrics each); readers: {[r['polls'] for r in results]} polls")
    for result in results:
        assert result["n_errors"] == 0, result["errors"]
        assert result["polls"] > 10 and result["last"] > 0
    with open_store(sqlite_url) as store:
        assert store.count_rows("live") == steps * 10
