"""Throughput, MFU and goodput of both runs.

Goodput follows the throughput detector's convention (monitor.detectors.throughput, after
ml-goodput-measurement): the sum of ideal step times over the sum of actual step times, the ideal
being the mean of the step times at most median + 3 MAD of their block.
"""

from __future__ import annotations

import numpy as np

from monitor import schema
from monitor.detectors import Detector, drawn_by, in_section
from monitor.schema import Drawing, RunData, Section

from app.report.model import Column, Table
from app.report.pair import ComparedPair


def throughput_table(pair: ComparedPair) -> Table:
    # The detector that measures goodput, as the pair was judged with it: its block length and
    # MAD factor define "ideal".
    detector = drawn_by(Drawing.GOODPUT, pair.detect.params)
    table = Table(
        id="throughput",
        title="Throughput, MFU and goodput",
        columns=[
            Column("run", "run", fmt=""),
            Column("tokens_per_s", "tokens/s (median)", fmt=",.0f"),
            Column("mfu", "MFU (median)", fmt=".1%"),
            Column("step_time_s", "step time s (median)", fmt=".4g"),
            Column("goodput", "goodput", fmt=".1%"),
            Column("findings", "throughput findings", fmt=""),
        ],
        note="Goodput: ideal over actual step time, ideal = mean of the step times ≤ median + 3 MAD "
             "of each block (ml-goodput-measurement's convention).",
        flag_key="flagged",
    )
    for data, found in pair.each_run():
        row = {"run": data.name,
               "tokens_per_s": _median(data, schema.PERF_TOKENS_PER_S),
               "mfu": _median(data, schema.PERF_MFU),
               "step_time_s": _median(data, schema.PERF_STEP_TIME_S),
               "goodput": _goodput(data, detector)}
        if all(row[k] is None for k in ("tokens_per_s", "mfu", "step_time_s")):
            continue
        hits = in_section(found, Section.THROUGHPUT)
        kinds = sorted({d.metric for d in hits})
        row["findings"] = f"{len(hits)} ({', '.join(kinds)})" if hits else ""
        row["flagged"] = any(d.severity.rank >= 1 for d in hits)
        table.rows.append(row)
    if not table.rows:
        table.empty_reason = pair.none_logged("throughput (perf/*)")
    return table


def _finite(data: RunData, key: str) -> np.ndarray:
    v = data.series(key).to_numpy(dtype=float)
    return v[np.isfinite(v)]


def _median(data: RunData, key: str) -> float | None:
    v = _finite(data, key)
    return float(np.median(v)) if v.size else None


def _goodput(data: RunData, detector: Detector | None) -> float | None:
    times = data.series(schema.PERF_STEP_TIME_S)
    if detector is None:
        return None
    times = times[np.isfinite(times.to_numpy(dtype=float))]
    if len(times) < 2:
        return None
    v = detector.step_verdicts(data, times, finished=True)
    judged = v[np.isfinite(v["ideal"].to_numpy())]  # steps of a block with an ideal to judge them by
    total = float(judged["time"].sum())
    # Lost time is never negative: steps faster than the ideal (the block before theirs set it, or
    # the sums round differently) lost none.
    return min(1.0, float(judged["ideal"].sum() / total)) if total > 0 else None
