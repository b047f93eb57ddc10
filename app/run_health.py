"""A run's health in one word, as the dashboard's runs table and `gapwatch runs` show it.

In order: an open critical incident; a crashed run; an open warning; a running run that has logged
nothing for a while (stale); a critical finding now resolved (had critical); no judgement of any
kind, neither the watch service's nor a stored `gapwatch detect`'s, and no finding (not judged:
"ok" would claim what nothing looked at); else ok.

An incident is open when the watch service's alert is, or, for a run the watch service does not
judge, when the last stored `detect` left it open at the run's end (as `detect` and the run's page
list it): a divergence found by `detect` that lasts to the end is "critical", not "had critical".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from monitor.judging.judge import judged_runs, open_severity
from monitor.watch.run_watcher import watched_runs

# A running run silent this long is stale: ten minutes is many steps of any training run.
STALE_AFTER_S = 600.0


@dataclass(frozen=True)
class Judged:
    """What judged the runs of a table: the watch service, a stored `detect`, and the worst
    incident each detect-only run was left with."""

    watched: set[str] = field(default_factory=set)
    detected: set[str] = field(default_factory=set)
    open_by_detect: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, store, runs: pd.DataFrame) -> "Judged":
        """For the runs of `store.list_runs()`: one small read per run that only `detect` judged
        and that has a finding (the others need none)."""
        watched, detected = watched_runs(store), judged_runs(store)
        found = {r.name for r in runs.itertuples(index=False) if isinstance(r.worst_severity, str)}
        open_by_detect = {}
        for name in sorted((detected - watched) & found):
            severity = open_severity(store, name)
            if severity is not None:
                open_by_detect[name] = severity
        return cls(watched, detected, open_by_detect)

    def __contains__(self, run: str) -> bool:
        return run in self.watched or run in self.detected


def health(row, judged: Judged, since_last_s: float | None, stale_after_s: float = STALE_AFTER_S) -> str:
    """The health of one row of `Store.list_runs()`; since_last_s: seconds since its last metric."""
    open_worst = row.worst_open_severity if isinstance(row.worst_open_severity, str) else None
    if open_worst is None:
        open_worst = judged.open_by_detect.get(row.name)
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
    if row.name not in judged and not isinstance(row.worst_severity, str):
        return "not judged"
    return "ok"
