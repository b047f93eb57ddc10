"""A run's health in one word, as the dashboard's runs table and `gapwatch runs` show it.

In order: an open critical alert; a crashed run; an open warning; a running run that has logged
nothing for a while (stale); a critical finding now resolved (had critical); no judgement of any
kind, neither the watch service's nor a stored `gapwatch detect`'s, and no finding (not judged:
"ok" would claim what nothing looked at); else ok.
"""

from __future__ import annotations

from monitor.judging.judge import judged_runs
from monitor.watch.run_watcher import watched_runs

# A running run silent this long is stale: ten minutes is many steps of any training run.
STALE_AFTER_S = 600.0


def judged(store) -> set[str]:
    """The runs something has judged: the watch service (its state) or a stored `detect`."""
    return watched_runs(store) | judged_runs(store)


def health(row, judged_runs: set[str], since_last_s: float | None, stale_after_s: float = STALE_AFTER_S) -> str:
    """The health of one row of `Store.list_runs()`; since_last_s: seconds since its last metric."""
    open_worst = row.worst_open_severity if isinstance(row.worst_open_severity, str) else None
    if open_worst == "critical":
        return "critical"
    if row.status == "crashed":
        return "crashed"
    if open_worst is not None:
        return "warning"
    if row.status == "running" and since_last_s is not None and since_last_s > stale_after_s:
        return "stale"
    if row.worst_severity == "critical":
        return "had critical"  # nothing open now, but `detect` or a resolved incident found it
    if row.name not in judged_runs and not isinstance(row.worst_severity, str):
        return "not judged"
    return "ok"
