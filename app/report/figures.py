"""The report's charts, drawn by the same figure functions as the dashboard (app/figures).

Series are thinned to `max_points` with tsdownsample's MinMax (each bucket keeps its minimum and
maximum, so spikes stay visible) before they are drawn: the HTML report carries the chart data
inline, and a 1.4M-step series must never travel whole to a browser. The delta chart is the
exception in what it reads, not in what it sends: its window medians and threshold come from the
full-resolution difference, as the divergence detector judges it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from tsdownsample import MinMaxDownsampler

from monitor import schema
from monitor.detectors import drawn_by
from monitor.schema import Detection, Drawing, RunData, Section, empty_long

from app import figures as F
from app.report.model import FigureItem, Table
from app.report.pair import ComparedPair

HELDOUT_CLIPPED = "the y range starts after the early transient: the first checkpoints lie above it"
DELTA_CLIPPED = "The y range is the windows' after the early transient: the first lie beyond it"
PERF_KEYS = (schema.PERF_TOKENS_PER_S, schema.PERF_DEVICE_TOKENS_PER_S, schema.PERF_MFU, schema.PERF_STEP_TIME_S)
DATA_KEYS = (schema.DATA_CURSOR, schema.DATA_EPOCH, schema.DATA_UNIQUE_FRACTION,
             schema.DATA_SEEN_ONCE_FRACTION, schema.DATA_SEEN_2PLUS_FRACTION,
             schema.DATA_EXPECTED_UNIQUE_FRACTION, schema.DATA_BATCH_REREAD_FRACTION)


@dataclass
class FigureConfig:
    """How much each chart may carry."""

    # Points per drawn series: the store reader's default budget (monitor/store/reader.py), about
    # 30 KB per series and drawn at once in Chromium.
    max_points: int = 2000
    # Downstream panels: the tasks whose difference is most significant come first.
    downstream_tasks: int = 6
    # Held-out sets drawn: C4 (the set reproductions quote) and those that differ most; eleven
    # sets of two runs each make a legend taller than the chart.
    heldout_sets: int = 4


def thin(series: pd.Series, max_points: int) -> pd.DataFrame:
    """(step, value) of the finite points of `series`, at most `max_points` of them."""
    v = series.to_numpy(dtype=float)
    s = series.index.to_numpy(dtype="int64")
    keep = np.isfinite(v)
    if not keep.all():  # a wholly finite 1.4M-step series is not copied to itself
        s, v = s[keep], v[keep]
    if len(s) > max_points:
        idx = MinMaxDownsampler().downsample(s, v, n_out=max_points)
        s, v = s[idx], v[idx]
    return pd.DataFrame({"step": s, "value": v})


def thin_long(run: RunData, keys, max_points: int) -> pd.DataFrame:
    parts = []
    for key in keys:
        frame = thin(run.series(key), max_points)
        if len(frame):
            parts.append(frame.assign(key=key)[["key", "step", "value"]])
    if not parts:
        return empty_long()
    return pd.concat(parts, ignore_index=True)


def detections_frame(found: list[Detection]) -> pd.DataFrame:
    columns = ["detector", "metric", "start_step", "end_step", "peak_step", "severity", "message", "score"]
    if not found:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    rows = [{**{c: getattr(d, c) for c in columns}, "severity": d.severity.value} for d in found]
    return pd.DataFrame(rows, columns=columns)


def build_figures(pair: ComparedPair, tables: list[Table], spike_scores: dict[str, pd.DataFrame],
                  config: FigureConfig | None = None) -> list[FigureItem]:
    """Every chart the pair has data for; `spike_scores` by run name (spike_table.spike_scores)."""
    config = config or FigureConfig()
    x_title = "step" if pair.axis == "step" else "run step (reference placed at equal tokens)"
    out: list[FigureItem] = []
    out += _train_figures(pair, config, x_title)
    out += _heldout_figure(pair, _top_sets(tables, config.heldout_sets), x_title)
    out += _downstream_figure(pair, _top_tasks(tables, config.downstream_tasks), config, x_title)
    out += _grad_norm_figure(pair, spike_scores[pair.run.name], config, x_title)
    out += _system_figures(pair, config, x_title)
    incidents = _incidents_of_run(tables, pair.run.name)
    if len(incidents):
        fig = F.alerts_timeline(incidents, x_title=x_title)
        out.append(FigureItem("fig-findings", f"Findings on {pair.run.name} over time", fig, section="findings"))
    return out


def _incidents_of_run(tables: list[Table], run: str) -> pd.DataFrame:
    """The run's rows of the findings table (its incidents, named as the table names them), as the
    alerts timeline reads them."""
    rows = [r for t in tables if t.id == "findings" for r in t.rows if r["run"] == run]
    columns = ["name", "metric", "severity", "state", "start_step", "end_step", "spans", "message"]
    return pd.DataFrame([{**r, "name": r["incident"]} for r in rows], columns=columns)


def _train_figures(pair: ComparedPair, config: FigureConfig, x_title: str) -> list[FigureItem]:
    loss_run = pair.run.series(schema.TRAIN_LOSS)
    if not len(loss_run):
        return []
    run_name, events = pair.run.name, pair.run.events
    if pair.reference is None:
        fig = F.loss_overlay(thin(loss_run, config.max_points), run_name=run_name, x_title=x_title)
        return [FigureItem("fig-overlay", f"Train loss of {run_name}", F.add_event_markers(fig, events),
                           section="train_delta")]
    ref_name = pair.reference.name
    # On the step axis the reference is drawn whole; on the token axis only where alignment placed
    # it on the run's steps.
    ref_loss = (pair.reference if pair.axis == "step" else pair.aligned_reference).series(schema.TRAIN_LOSS)
    fig = F.loss_overlay(thin(loss_run, config.max_points), thin(ref_loss, config.max_points),
                         run_name=run_name, reference_name=ref_name, x_title=x_title)
    out = [FigureItem("fig-overlay", "Train loss, run over reference", F.add_event_markers(fig, events),
                      section="train_delta")]
    # The detector's own windows and threshold (app.figures.reference_delta); the pointwise
    # difference underneath is thinned like every other series.
    windows, points = F.reference_delta(F.series_frame(loss_run), F.series_frame(ref_loss), params=pair.detect.params)
    if len(windows):
        points = thin(points.set_index("x")["delta"], config.max_points).rename(columns={"step": "x", "value": "delta"})
        fig = F.delta_figure(windows, points, run_name=run_name, reference_name=ref_name, x_title=x_title)
        shown = fig.layout.yaxis.range
        beyond = shown is not None and float(np.nanmax(np.abs(windows["delta"]))) > shown[1]
        out.append(FigureItem("fig-delta", "Train loss delta and the divergence threshold",
                              F.add_event_markers(fig, events),
                              "Window medians of run − reference; the band is the reference-divergence "
                              "detector's threshold." + (f" {DELTA_CLIPPED}." if beyond else ""), section="train_delta"))
    return out


def _heldout_figure(pair: ComparedPair, sets: list[str], x_title: str) -> list[FigureItem]:
    """The chosen `sets` of all the run logged (the title counts them), the y range opening after
    the early transient as the dashboard's does by default: an untrained model's held-out loss
    (22 nats at step 0 against 3.3 later) would flatten the differences the findings are about."""
    keys = [k for k in pair.aligned_run.scalars.columns if k.startswith(schema.HELDOUT_PREFIX)]
    mine = F.heldout_frame(F.long_frame(pair.aligned_run, keys))
    if not mine["set"].isin(sets).any():
        return []
    theirs = F.heldout_frame(F.long_frame(pair.aligned_reference, keys))
    fig = F.heldout_figure(mine, theirs, run_name=pair.run.name, reference_name=pair.reference.name, x_title=x_title,
                           full_y=False, sets=sets)
    # Said where the range was cut, as the dashboard's "y range includes the start" says it there.
    caption = HELDOUT_CLIPPED if fig.layout.yaxis.range is not None else ""
    out = [FigureItem("fig-heldout", "Held-out loss at matching checkpoints", fig, caption, section="heldout")]
    return out + _heldout_delta_figure(pair, x_title)


def _heldout_delta_figure(pair: ComparedPair, x_title: str) -> list[FigureItem]:
    """Run − reference of held-out loss at the checkpoints the detector that draws the band judged,
    with the band a finding had to clear: a divergence of 0.02 nats is a thin line between curves
    that fall by 3 nats, and plain here."""
    detector = drawn_by(Drawing.HELDOUT_BAND, pair.detect.params)
    if detector is None:
        return []
    judged = detector.checkpoint_deltas(pair.aligned_run, pair.aligned_reference)
    if not len(judged):
        return []
    fig = F.delta_figure(judged.rename(columns={"step": "x"}), run_name=pair.run.name,
                         reference_name=pair.reference.name, x_title=x_title,
                         title="held-out loss delta (run − reference)", summary="median over sets",
                         band_label="held-out divergence threshold")
    return [FigureItem("fig-heldout-delta", "Held-out loss delta and the divergence threshold", fig,
                       "Run − reference at each checkpoint judged (the median over the sets both log); the band "
                       "is the held-out divergence detector's threshold.", section="heldout")]


def _downstream_figure(pair: ComparedPair, tasks: list[str], config: FigureConfig, x_title: str) -> list[FigureItem]:
    if not tasks:
        return []
    keys = [k for k in pair.aligned_run.scalars.columns if k.startswith(schema.DOWNSTREAM_PREFIX)]
    mine = F.downstream_frame(F.long_frame(pair.aligned_run, keys))
    theirs = F.downstream_frame(F.long_frame(pair.aligned_reference, keys))
    fig = F.downstream_figure(mine, theirs, run_name=pair.run.name, reference_name=pair.reference.name,
                              tasks=tasks, max_tasks=config.downstream_tasks, x_title=x_title)
    return [FigureItem("fig-downstream", "Downstream evals with the largest differences", fig, section="downstream")]


def _grad_norm_figure(pair: ComparedPair, scores: pd.DataFrame, config: FigureConfig,
                      x_title: str) -> list[FigureItem]:
    grad = pair.run.series(schema.TRAIN_GRAD_NORM)
    if not len(grad):
        return []
    score = scores[scores["key"] == schema.SPIKE_SCORE_GRAD_NORM].set_index("step")["value"]
    spikes = pair.findings(Section.GRAD_NORM, schema.TRAIN_GRAD_NORM)
    fig = F.grad_norm_figure(thin(grad, config.max_points), spikes=detections_frame(spikes),
                             spike_score=thin(score, config.max_points), x_title=x_title)
    return [FigureItem("fig-grad-norm", f"Grad norm of {pair.run.name} with its spikes", fig, section="spikes")]


def _system_figures(pair: ComparedPair, config: FigureConfig, x_title: str) -> list[FigureItem]:
    out = []
    perf = thin_long(pair.run, PERF_KEYS, config.max_points)
    if len(perf):
        stalls = pair.findings(Section.THROUGHPUT, schema.PERF_STEP_TIME_S)
        fig = F.throughput_figure(perf, stalls=detections_frame(stalls), x_title=x_title)
        out.append(FigureItem("fig-throughput", f"Throughput of {pair.run.name}", fig, section="throughput"))
    data = thin_long(pair.run, DATA_KEYS, config.max_points)
    if len(data):
        out.append(FigureItem("fig-data", f"Data loader of {pair.run.name}", F.data_figure(data, x_title=x_title),
                              section="data"))
    return out


def _top_sets(tables: list[Table], k: int) -> list[str]:
    """C4 first when present, then the held-out sets whose last shared Δ is largest in errors."""
    for t in tables:
        if t.id == "heldout" and t.rows:
            last = [c.key for c in t.columns if c.key.startswith("at_")][-1]

            def size(row) -> float:
                e = row.get(last)
                if e is None or not np.isfinite(e.value):
                    return -1.0
                return abs(e.value) / e.stderr if e.stderr else abs(e.value)

            names = [r["set"] for r in sorted(t.rows, key=size, reverse=True)]
            c4 = [n for n in names if n.startswith("c4")]
            return (c4[:1] + [n for n in names if n not in c4[:1]])[:k]
    return []


def _top_tasks(tables: list[Table], k: int) -> list[str]:
    """`<task>/<metric>` of the downstream rows with the largest |z| (rows come sorted by it)."""
    for t in tables:
        if t.id == "downstream":
            return [f"{r['task']}/{r['metric']}" for r in t.rows[:k]]
    return []
