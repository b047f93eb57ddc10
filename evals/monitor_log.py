"""Eval results into a run's metrics at a step, under the names monitor/schema.py declares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from monitor.client import Monitor, NullMonitor
from monitor.schema import (
    PARITY_KL_MEAN, PARITY_TOP1, EventKind, downstream_key, heldout_key,
)

if TYPE_CHECKING:  # for annotations only: evals.downstream imports lm-eval (seconds)
    from evals.downstream import DownstreamResult
    from evals.heldout import HeldoutResult
    from evals.parity import ParityReport

AnyMonitor = Monitor | NullMonitor
# The event payload says which eval ran under "eval": "kind" is taken by the event's own kind
# argument of Monitor.event(kind, step, **payload).


def heldout_metrics(results: Iterable["HeldoutResult"]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in results:
        out |= {heldout_key(r.name, "loss"): float(r.loss), heldout_key(r.name, "bpb"): float(r.bpb),
                heldout_key(r.name, "stderr"): float(r.stderr), heldout_key(r.name, "n"): float(r.n)}
    return out


def downstream_metrics(results: Iterable["DownstreamResult"]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in results:
        out |= {downstream_key(r.task, r.metric): float(r.value),
                downstream_key(r.task, r.metric, "stderr"): float(r.stderr),
                downstream_key(r.task, r.metric, "n"): float(r.n)}
    return out


def parity_metrics(report: "ParityReport") -> dict[str, float]:
    return {PARITY_KL_MEAN: float(report.kl_mean), PARITY_TOP1: float(report.top1)}


def log_heldout(monitor: AnyMonitor, step: int, results: Iterable["HeldoutResult"]) -> None:
    results = list(results)
    monitor.log(step, heldout_metrics(results))
    monitor.event(EventKind.EVAL, step, eval="heldout", sets=[r.name for r in results])


def log_downstream(monitor: AnyMonitor, step: int, results: Iterable["DownstreamResult"]) -> None:
    results = list(results)
    monitor.log(step, downstream_metrics(results))
    monitor.event(EventKind.EVAL, step, eval="downstream", tasks=sorted({r.task for r in results}))


def log_parity(monitor: AnyMonitor, step: int, report: "ParityReport") -> None:
    monitor.log(step, parity_metrics(report))
    monitor.event(EventKind.EVAL, step, eval="parity", n_tokens=report.n_tokens)
