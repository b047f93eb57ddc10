"""Everything the dashboard reads from the store, each read under a point budget or a row limit.

Series come through `store.read_scalars` (rollups, `max_points`); events, detections and alerts
are small tables read whole per run (alerts capped by the store, newest first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tsdownsample import MinMaxLTTBDownsampler

from app.dashboard.axis import STEP_AXIS, AxisMap, interpolated_tokens, linear_tokens
from app.dashboard.config import DashboardConfig
from app.dashboard.contain import contained
from app.dashboard.routes import ViewSpec
from app.findings import also, headline
from app.figures.markers import DEFAULT_KINDS
from app.report.downstream_table import downstream_table
from app.report.pair import ComparedPair
from app.run_health import STALE_AFTER_S, Judged, health
from monitor.alerting.grouping import (
    group,
    its_spans,
    most_severe_first,
    progress_from_marks,
    recurring_stretches,
)
from monitor.alerting.ledger import stored_alerts
from monitor.judging.align import align_pair
from monitor.judging.judge import load_cleans
from monitor.errors import GapwatchError
from monitor.schema import (
    DOWNSTREAM_PREFIX,
    HELDOUT_PREFIX,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    TRAIN_TOKENS,
    RunData,
    RunInfo,
    Severity,
    empty_events,
    empty_long,
)
from app.figures.smoothing import ema_debiased
from monitor.store import KeyRows, Store, run_data

# What the run page draws, by key prefix. The reference contributes only what is compared.
RUN_KEY_PREFIXES = (TRAIN_LOSS, TRAIN_GRAD_NORM, "perf/", "data/", "detect/spike_score/", HELDOUT_PREFIX,
                    DOWNSTREAM_PREFIX)
REFERENCE_KEY_PREFIXES = (TRAIN_LOSS, HELDOUT_PREFIX, DOWNSTREAM_PREFIX)
# Counts of sequences (`.../n`) are not drawn, nor held-out bits per byte (the held-out panel draws
# the loss and its stderr); a downstream task's bpb is a metric of its own, offered and drawn.
COUNT_SUFFIX = "/n"
HELDOUT_BPB_SUFFIX = "/bpb"
# Sparse series: a new point changes a derived panel (held-out gap, evals), so it re-renders the view.
SPARSE_PREFIXES = (HELDOUT_PREFIX, DOWNSTREAM_PREFIX)
# A link to a step range shows this share of the range again on each side, as context.
LINK_CONTEXT_FRACTION = 0.5
LINK_CONTEXT_MIN_STEPS = 10
# Points used to interpolate a token axis from a logged `train/tokens` series.
TOKEN_KNOTS = 2000
# Series drawn smoothed when the view asks for smoothing (the rest are drawn as logged).
SMOOTHED_KEYS = (TRAIN_LOSS,)

EMPTY_MEANS = pd.DataFrame({"step": pd.Series(dtype="int64"), "value": pd.Series(dtype=float)})
DELTA_ROWS_PER_POINT = 16
"""The delta panel reads every logged train loss of a view holding up to this many rows per point
of the budget (32k at 2,000 points, tens of milliseconds), as the store's reader reads raw rows for
a chart before thinning them (its RAW_READ_FACTOR); a wider view, the store's bucket means."""

DETECTION_COLUMNS = ["detector", "metric", "start_step", "end_step", "peak_step", "severity", "score", "message"]


def wanted_keys(all_keys: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [k for k in all_keys if k.startswith(prefixes) and not k.endswith(COUNT_SUFFIX)
            and not (k.startswith(HELDOUT_PREFIX) and k.endswith(HELDOUT_BPB_SUFFIX))]


@dataclass(frozen=True)
class DownstreamTasks:
    """The downstream metrics a run page offers, in the order it draws them."""

    names: list[str]
    by_difference: bool
    """Ordered by their difference from the reference (else alphabetically: no reference, or none
    of its downstream evals)."""


def downstream_tasks(store: Store, run: str, reference: str | None,
                     max_points: int = DashboardConfig.max_points) -> DownstreamTasks:
    """`<task>/<metric>` of every downstream eval the runs logged (their stderr and n left out),
    in the report's order: the tasks whose difference from the reference is most significant
    first (app/report/downstream_table.py, on the two runs' downstream series read under the
    point budget), then the rest alphabetically."""
    keys = {run: [k for k in store.list_keys(run) if k.startswith(DOWNSTREAM_PREFIX)]}
    if reference:
        keys[reference] = [k for k in store.list_keys(reference) if k.startswith(DOWNSTREAM_PREFIX)]
    names = sorted({k[len(DOWNSTREAM_PREFIX):] for ks in keys.values() for k in ks
                    if not k.endswith(("/stderr", "/n"))})
    if not reference or not keys[run] or not keys[reference]:
        return DownstreamTasks(names, by_difference=False)
    first = _most_different(store, run, reference, keys, max_points)
    return DownstreamTasks(first + [n for n in names if n not in first], by_difference=True)


def series_options(store: Store, run: str, reference: str | None) -> list[str]:
    """Every key the run or its reference logged, sorted: what a person may pick to draw."""
    keys = set(store.list_keys(run))
    if reference:
        keys |= set(store.list_keys(reference))
    return sorted(keys)


def _most_different(store: Store, run: str, reference: str, keys: dict[str, list[str]],
                    max_points: int) -> list[str]:
    loaded = {name: _budgeted_run(store, name, ks, max_points) for name, ks in keys.items()}
    try:
        aligned_run, aligned_ref = align_pair(loaded[run], loaded[reference], "auto")
    except GapwatchError:
        # A token count that does not grow places nothing on tokens; the steps still pair the
        # checkpoints well enough to order the tasks.
        aligned_run, aligned_ref = align_pair(loaded[run], loaded[reference], "step")
    pair = ComparedPair(run=loaded[run], reference=loaded[reference], aligned_run=aligned_run,
                        aligned_reference=aligned_ref, axis="", axis_reason="")
    return [f"{row['task']}/{row['metric']}" for row in downstream_table(pair).rows]


def _budgeted_run(store: Store, name: str, keys: list[str], max_points: int) -> RunData:
    """`keys` of a run and its token count, each read under the point budget, as RunData: what
    ordering the tasks needs, never the run at full resolution. Evals every few thousand steps
    come back whole; a downsampled cumulative token count is still close to linear between its
    points, which is all the token axis asks of it."""
    long = store.read_scalars(name, [*keys, TRAIN_TOKENS], max_points=max_points)
    rows = {str(key): KeyRows(g["step"].to_numpy(np.int64), np.zeros(len(g), np.int64), g["value"].to_numpy(float))
            for key, g in long.groupby("key", sort=False)}
    return run_data(store.run_info(name), rows, empty_events())


def axis_for(store: Store, info: RunInfo, kind: str) -> AxisMap | None:
    """The run's step<->x map for `kind`; None when a token axis cannot be built for it."""
    if kind != "tokens":
        return STEP_AXIS
    if info.tokens_per_step:
        return linear_tokens(info.tokens_per_step)
    tokens = store.read_scalars(info.name, [TRAIN_TOKENS], max_points=TOKEN_KNOTS)
    return interpolated_tokens(tokens["step"].to_numpy(), tokens["value"].to_numpy()) if len(tokens) else None


@dataclass
class RunSlice:
    """One run's part of a view: its series (long frame key/step/value/x) and events, with x."""

    info: RunInfo
    axis: AxisMap
    long: pd.DataFrame
    bucket_width: dict[str, int]
    events: pd.DataFrame
    keys: list[str]
    smoothed: dict[str, pd.DataFrame] = field(default_factory=dict)
    """key -> (step, value, x) of its smoothed line, when the view smooths."""
    train_means: pd.DataFrame = field(default_factory=lambda: EMPTY_MEANS)
    """(step, value): train loss as the store's bucket means, what the train–held-out gap is
    taken against (its min/max points scatter by more than the gap)."""
    logged: dict[str, tuple[int, int]] = field(default_factory=dict)
    """key -> the first and last step the run logged it at, over the whole run (not only the
    range read): what tells "nothing in this step range" from "the runs share no steps"."""

    @property
    def name(self) -> str:
        return self.info.name

    def last_steps(self) -> dict[str, int]:
        """The last step drawn of each key: live polling asks for what came after it."""
        if not len(self.long):
            return {}
        return {k: int(v) for k, v in self.long.groupby("key")["step"].max().items()}


@dataclass(frozen=True)
class DeltaInput:
    """Train loss of the run and its reference over a view, as the delta panel's windows take it
    (app.figures.reference_delta): the detector's windows need every logged value, which a
    downsampled read's bucket extremes are not."""

    run: pd.DataFrame
    """(step, value, x): every logged value, or bucket means."""
    reference: pd.DataFrame
    values_per_point: float
    """Logged values one row stands for: 1, or those a bucket mean averages."""


@dataclass
class ViewData:
    spec: ViewSpec
    axis_kind: str
    run: RunSlice
    reference: RunSlice | None
    detections: pd.DataFrame
    step_range: tuple[int, int] | None
    highlight: tuple[int, int] | None
    notices: list[str] = field(default_factory=list)
    delta: DeltaInput | None = None
    """What the delta panel's windows are drawn from; None without a reference that, like the
    run, logs train loss."""


def link_range(start: int | None, end: int | None) -> tuple[int, int] | None:
    """The steps shown around a linked range [start, end]: the range plus context each side."""
    if start is None and end is None:
        return None
    lo = start if start is not None else end
    hi = end if end is not None else start
    pad = max(int((hi - lo) * LINK_CONTEXT_FRACTION), LINK_CONTEXT_MIN_STEPS)
    return max(0, lo - pad), hi + pad


def load_view(store: Store, spec: ViewSpec, max_points: int, step_range: tuple[int, int] | None,
              picked: tuple[str, ...] = ()) -> ViewData:
    """Read what the run page draws for `spec` over `step_range` (the run's steps; None = all),
    and the `picked` series of both runs (any logged keys a person chose to see)."""
    notices: list[str] = []
    info = store.run_info(spec.run)
    ref_name = spec.reference if spec.reference is not None else info.reference
    ref_info = None
    if ref_name:
        if store.get_run(ref_name) is None:
            notices.append(f"reference run {ref_name!r} is not in the store")
            ref_name = None
        else:
            ref_info = store.run_info(ref_name)
    axis_kind = spec.axis
    run_axis = axis_for(store, info, axis_kind)
    ref_axis = axis_for(store, ref_info, axis_kind) if ref_info is not None else None
    if run_axis is None or (ref_info is not None and ref_axis is None):
        missing = spec.run if run_axis is None else ref_name
        if TRAIN_TOKENS in store.series_marks(missing):
            notices.append(f"run {missing!r}: {TRAIN_TOKENS} does not grow with steps, so it gives no token "
                           f"axis: showing steps")
        else:
            notices.append(f"run {missing!r} has neither tokens_per_step nor {TRAIN_TOKENS}: showing steps")
        axis_kind, run_axis, ref_axis = "step", STEP_AXIS, STEP_AXIS if ref_info is not None else None

    run_slice = _read_slice(store, info, run_axis, RUN_KEY_PREFIXES, step_range, max_points, picked)
    _no_finite_notice(run_slice, notices)
    run_slice.smoothed = _smoothed_or_notice(store, info.name, run_axis, spec.smoothing, step_range, max_points,
                                             notices)
    run_slice.train_means = _train_means_or_notice(store, run_slice, step_range, notices)
    reference = None
    if ref_info is not None:
        # The reference is read over the x range the run covers in this view, in its own steps.
        x = run_slice.long["x"].to_numpy() if len(run_slice.long) else np.empty(0)
        x = x[np.isfinite(x)]
        ref_range = None
        if len(x):
            lo, hi = ref_axis.to_steps([x.min(), x.max()])
            ref_range = (max(0, int(np.floor(lo))), int(np.ceil(hi)))
        # A reference that cannot be read costs its lines, not the run's.
        reference, failed = contained(f"reference {ref_name!r} not drawn", lambda: _read_slice(
            store, ref_info, ref_axis, REFERENCE_KEY_PREFIXES, ref_range, max_points, picked))
        if failed:
            notices.append(failed)
        else:
            _no_finite_notice(reference, notices)
            reference.smoothed = _smoothed_or_notice(store, ref_info.name, ref_axis, spec.smoothing, ref_range,
                                                     max_points, notices)
            reference.train_means = _train_means_or_notice(store, reference, ref_range, notices)
    delta = None
    if reference is not None and TRAIN_LOSS in run_slice.keys and TRAIN_LOSS in reference.keys:
        delta, failed = contained("no train loss delta windows", lambda: delta_input(
            store, run_slice, reference, step_range, max_points))
        if failed:
            notices.append(failed)
    detections = _detections(store, spec.run, step_range)
    highlight = (spec.start, spec.end) if spec.start is not None or spec.end is not None else None
    return ViewData(spec=spec, axis_kind=axis_kind, run=run_slice, reference=reference, detections=detections,
                    step_range=step_range, highlight=highlight, notices=notices, delta=delta)


def delta_input(store: Store, run: RunSlice, reference: RunSlice, step_range: tuple[int, int] | None,
                max_points: int) -> DeltaInput | None:
    """Train loss of the run over `step_range` (None: all) and of the reference over the same x,
    for the delta panel: every logged value when neither range holds more than
    DELTA_ROWS_PER_POINT rows per point of the budget, else the store's bucket means of both (None
    where the run logged no train loss in the range)."""
    marks = [store.series_marks(part.name)[TRAIN_LOSS] for part in (run, reference)]
    lo, hi = marks[0].first_step, marks[0].last_step
    if step_range is not None:
        lo, hi = max(lo, step_range[0]), min(hi, step_range[1])
    if lo > hi:
        return None
    # The reference over the x the run's range covers (not the drawn points': a downsampled
    # read's first point may lie a few steps in), in its own steps.
    ref_lo, ref_hi = reference.axis.to_steps(run.axis.to_x([lo, hi]))
    spans = [(lo, hi), (max(0, int(np.floor(ref_lo))), int(np.ceil(ref_hi)))]
    densities = [mark.rows / (mark.last_step - mark.first_step + 1) for mark in marks]
    every_row = all(d * (b - a + 1) <= DELTA_ROWS_PER_POINT * max_points for d, (a, b) in zip(densities, spans))
    frames = []
    for part, (a, b) in zip((run, reference), spans):
        # A budget of the whole range reads every row (no rollups).
        rows = (store.read_scalars(part.name, [TRAIN_LOSS], step_range=(a, b), max_points=b - a + 2)
                if every_row else store.read_bucket_means(part.name, TRAIN_LOSS, (a, b)))
        frames.append(rows[["step", "value"]].assign(x=part.axis.to_x(rows["step"].to_numpy())))
    if every_row:
        return DeltaInput(*frames, values_per_point=1.0)
    # A bucket holds the rows both runs log in its steps (the detector's windows count steps both
    # logged), or one logged value where they log more seldom than a bucket is wide.
    bucket = np.median(np.diff(frames[0]["step"].to_numpy())) if len(frames[0]) > 1 else 1.0
    return DeltaInput(*frames, values_per_point=max(1.0, bucket * min(densities)))


def _no_finite_notice(part: RunSlice, notices: list[str]) -> None:
    """Say which series read for the view hold only NaN or Inf in it: their legend entries have no
    line, which would otherwise read as a drawing fault."""
    values = part.long[["key", "value"]]
    finite = np.isfinite(values["value"].to_numpy(dtype=float))
    found = set(values["key"][finite])
    # A key read with a bucket width had rows in the range; downsampled, its NaN rows are dropped.
    unfinite = sorted(k for k in set(values["key"].unique()) | set(part.bucket_width) if k not in found)
    if unfinite:
        notices.append(f"{part.name!r} logged only NaN or Inf in this range for {', '.join(unfinite)}")


def _smoothed_or_notice(store: Store, run: str, axis: AxisMap, weight: float, step_range, max_points: int,
                        notices: list[str]) -> dict[str, pd.DataFrame]:
    lines, failed = contained(f"no smoothed line of {run!r}", lambda: smoothed_lines(
        store, run, axis, weight, step_range, max_points))
    if failed:
        notices.append(failed)
    return lines or {}


def _train_means_or_notice(store: Store, part: RunSlice, step_range, notices: list[str]) -> pd.DataFrame:
    """Read only for a run that logs both train and held-out loss: there is a gap to draw."""
    if TRAIN_LOSS not in part.keys or not any(k.startswith(HELDOUT_PREFIX) for k in part.keys):
        return EMPTY_MEANS
    means, failed = contained(f"no train–held-out gap of {part.name!r}",
                              lambda: store.read_bucket_means(part.name, TRAIN_LOSS, step_range))
    if failed:
        notices.append(failed)
    return EMPTY_MEANS if means is None else means


def smoothed_lines(store: Store, run: str, axis: AxisMap, weight: float, step_range: tuple[int, int] | None,
                   max_points: int) -> dict[str, pd.DataFrame]:
    """The SMOOTHED_KEYS of `run`, smoothed with weight `weight` (TensorBoard's debiased EMA) over
    every logged step of the range, then thinned to the point budget: smoothing downsampled
    buckets would average their minima and maxima, not the run's steps. Empty for weight 0."""
    if not weight:
        return {}
    marks = store.series_marks(run)
    out = {}
    for key in SMOOTHED_KEYS:
        if key not in marks:
            continue
        lo, hi = marks[key].first_step, marks[key].last_step
        if step_range is not None:
            lo, hi = max(lo, step_range[0]), min(hi, step_range[1])
        if lo > hi:
            continue
        # A budget of the whole range reads every row (no rollups): smoothing needs each step.
        raw = store.read_scalars(run, [key], step_range=(lo, hi), max_points=hi - lo + 2)
        raw = raw[np.isfinite(raw["value"].to_numpy())]
        steps = raw["step"].to_numpy(dtype="int64")
        smooth = ema_debiased(raw["value"].to_numpy(dtype=float), weight)
        if len(steps) > max_points:
            idx = MinMaxLTTBDownsampler().downsample(steps, smooth, n_out=max_points)
            steps, smooth = steps[idx], smooth[idx]
        out[key] = pd.DataFrame({"step": steps, "value": smooth, "x": axis.to_x(steps)})
    return out


def _read_slice(store: Store, info: RunInfo, axis: AxisMap, prefixes: tuple[str, ...],
                step_range: tuple[int, int] | None, max_points: int, picked: tuple[str, ...] = ()) -> RunSlice:
    logged = store.list_keys(info.name)
    keys = wanted_keys(logged, prefixes)
    keys += [k for k in dict.fromkeys(picked) if k in logged and k not in keys]
    if keys:
        read = store.read_series(info.name, keys, step_range=step_range, max_points=max_points)
        widths = {k: w for (_, k), w in read.bucket_width.items()}
        long = read.rows.drop(columns="run")
    else:
        long = empty_long()
        widths = {}
    # Derived series (spike scores) live apart from the logged rows; drawn beside them.
    derived = store.read_derived(info.name, step_range=step_range, max_points=max_points)
    derived = derived[derived["key"].str.startswith(prefixes)]
    if len(derived):
        long = pd.concat([long, derived], ignore_index=True)
        keys = keys + sorted(set(derived["key"]))
    long["x"] = axis.to_x(long["step"].to_numpy())
    events = store.read_events(info.name, kinds=DEFAULT_KINDS)
    if step_range is not None and len(events):
        events = events[(events["step"] >= step_range[0]) & (events["step"] <= step_range[1])]
    events = events.assign(x=axis.to_x(events["step"].to_numpy())) if len(events) else events.assign(x=pd.Series(dtype=float))
    marks = store.series_marks(info.name)  # kept with every write: no scan
    logged_at = {k: (int(marks[k].first_step), int(marks[k].last_step)) for k in keys if k in marks}
    return RunSlice(info=info, axis=axis, long=long, bucket_width=widths, events=events, keys=keys, logged=logged_at)


def _detections(store: Store, run: str, step_range: tuple[int, int] | None) -> pd.DataFrame:
    found = store.read_detections(run)
    frame = pd.DataFrame([{c: getattr(d, c) for c in DETECTION_COLUMNS} for d in found], columns=DETECTION_COLUMNS)
    if len(frame):
        frame["severity"] = frame["severity"].map(lambda s: getattr(s, "value", s))
        if step_range is not None:
            frame = frame[(frame["end_step"] >= step_range[0]) & (frame["start_step"] <= step_range[1])]
    return frame.reset_index(drop=True)


def findings(store: Store, run: str) -> pd.DataFrame:
    """What was found on `run`: its alerts (the watch service's incidents), then the stored
    detections no alert holds (those `gapwatch detect` stored where the watch service alerted on
    nothing), grouped into incidents by the watch service's rule (monitor/alerting/grouping.py)
    with state "found", or "resolved" where the run showed the condition gone later (as
    `gapwatch detect` lists it).
    Alerts that keep coming back are one row, as `detect` lists a recurring incident (_recurring).
    Columns as `read_alerts`, plus `name`, `story` and `incident_id` (as `gapwatch detect` and the
    notifications give them), `source` ("alert" or "detection"), `count` (detections in the row)
    and `spans` (each episode's first and last step, where the timeline draws bars); `message` is
    the incident's line as `detect` prints it (app/findings.py)."""
    alerts = store.read_alerts(run).assign(source="alert", count=1)
    described = {a.id: a for a in stored_alerts(store, run)}
    alerts["name"] = [described[i].name if i in described else d for i, d in zip(alerts["id"], alerts["detector"])]
    alerts["incident_id"] = [described[i].incident_id if i in described else "" for i in alerts["id"]]
    alerts["story"] = [described[i].key[1] if i in described else d for i, d in zip(alerts["id"], alerts["detector"])]
    alerts["message"] = [m + also(described[i]) if i in described else m for i, m in zip(alerts["id"], alerts["message"])]
    stored = store.read_detections(run)
    alerted = set(alerts["incident_id"]) - {""}
    progress, cleans = ((progress_from_marks(run, store.run_marks(run).series), load_cleans(store, run))
                        if stored else ({}, []))
    # The stored detections the watch service's tracker puts in an alerted episode (recurrences it
    # folded into a cool-down among them: they told nothing new) are that alert's, drawn as its bars;
    # unless the episode of that id is not on the alert's steps (detections judged another way).
    by_id = {a.incident_id: a for a in described.values()}
    episodes = {i.incident_id: i for i in group(stored, progress, cleans=cleans, fold=False)
                if i.incident_id in alerted and i.start_step <= by_id[i.incident_id].end_step
                and i.end_step >= by_id[i.incident_id].start_step} if stored and alerted else {}
    alerts["spans"] = [[list(span) for span in its_spans(described[a], episodes[i].detections)] if i in episodes
                       else [[start, end]] for a, i, start, end in
                       zip(alerts["id"], alerts["incident_id"], alerts["start_step"], alerts["end_step"])]
    alerts = _recurring(alerts)
    if not stored:
        return alerts
    # So are those an alert's members span (an alert stored before episodes had ids).
    held = {_identity(d) for i in episodes.values() for d in i.detections}
    spans = [(m.detector, m.metric, m.start_step, m.end_step) for a in described.values()
             for m in (a.members.values() or [a])]
    loose = [d for d in stored if _identity(d) not in held and not any(
        d.detector == detector and d.metric == metric and d.start_step <= end and d.end_step >= start
        for detector, metric, start, end in spans)]
    if not loose:
        return alerts
    incidents = most_severe_first(group(loose, progress, cleans=cleans))
    found = pd.DataFrame([{**i.to_dict(), "message": headline(i), "state": "resolved" if i.resolved else "found",
                           "source": "detection"} for i in incidents])
    found["severity"] = found["severity"].map(lambda s: getattr(s, "value", s))
    found = found[[c for c in alerts.columns if c in found.columns]]
    frame = pd.concat([alerts, found], ignore_index=True) if len(alerts) else found.reset_index(drop=True)
    return frame.astype({"start_step": "int64", "end_step": "int64", "peak_step": "int64", "count": "int64"})


def _identity(d) -> tuple:
    return (d.detector, d.metric, int(d.start_step), int(d.end_step))


def _recurring(alerts: pd.DataFrame) -> pd.DataFrame:
    """`alerts` with each stretch that keeps coming back (five or more episodes of one story and
    name in a row: grouping.recurring_stretches) as one row in the latest one's place, counting
    them and keeping each episode's span."""
    by_id = alerts.sort_values("id").to_dict("records")
    folded: dict[int, dict] = {}
    for stretch in recurring_stretches(by_id, lambda a: a["story"], lambda a: a["name"]):
        if len(stretch) == 1:
            continue
        latest = stretch[-1]
        folded.update({a["id"]: {} for a in stretch})
        folded[latest["id"]] = {
            **latest, "severity": max((a["severity"] for a in stretch), key=lambda v: Severity(v).rank),
            "start_step": min(a["start_step"] for a in stretch), "end_step": max(a["end_step"] for a in stretch),
            "count": sum(a["count"] for a in stretch), "spans": [span for a in stretch for span in a["spans"]],
            "message": f"{len(stretch)} episodes; the latest: {latest['message']}"}
    if not folded:
        return alerts
    rows = [folded.get(r["id"], r) for r in alerts.to_dict("records")]
    return pd.DataFrame([r for r in rows if r], columns=alerts.columns).astype(alerts.dtypes.to_dict())


def run_extent(store: Store, run: str) -> tuple[int, int] | None:
    """First and last step the run logged anything at."""
    marks = store.series_marks(run).values()
    return (min(m.first_step for m in marks), max(m.last_step for m in marks)) if marks else None


def new_points(store: Store, run: str, last: dict[str, int], max_points: int) -> pd.DataFrame:
    """Rows of `run` logged after each key's last drawn step (one read per distinct last step)."""
    groups: dict[int, list[str]] = {}
    for key, step in last.items():
        groups.setdefault(int(step), []).append(key)
    frames = [store.read_scalars(run, keys, since_step=step, max_points=max_points) for step, keys in groups.items()]
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty_long("run", "key", "step", "value")
    return pd.concat(frames, ignore_index=True)


def overview(store: Store, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> pd.DataFrame:
    """One row per run: name, status, reference (and whether that run is missing from the store),
    last step, tokens, seconds since its last metric, open alerts, health (app/run_health.py), and
    a note saying why a cell could not be filled (None when all could)."""
    now = time.time() if now is None else now
    runs = store.list_runs()
    names = set(runs["name"])
    judged = Judged.read(store, runs)
    rows = []
    for r in runs.itertuples(index=False):
        last_step = None if pd.isna(r.last_step) else int(r.last_step)
        tokens, note = contained("tokens", lambda: _tokens(store, r.name, r.tokens_per_step, last_step))
        age = None if pd.isna(r.last_wall_time) else max(0.0, now - float(r.last_wall_time))
        state = health(r, judged, age, stale_after_s)
        reference = r.reference if isinstance(r.reference, str) and r.reference else None
        rows.append({"name": r.name, "status": r.status, "reference": reference,
                     "reference_missing": reference is not None and reference not in names, "last_step": last_step,
                     "tokens": tokens, "since_last_s": age, "open_alerts": int(r.open_alerts),
                     "health": state, "project": r.project, "source": r.source, "note": note})
    return pd.DataFrame(rows, columns=["name", "status", "reference", "reference_missing", "last_step", "tokens",
                                       "since_last_s", "open_alerts", "health", "project", "source", "note"])


def _tokens(store: Store, run: str, tokens_per_step, last_step: int | None) -> float | None:
    if last_step is None:
        return None
    if tokens_per_step and not pd.isna(tokens_per_step):
        return float(tokens_per_step) * last_step
    # A cumulative count: the largest value of a 4-point read is its last (rollups keep maxima).
    tokens = store.read_scalars(run, [TRAIN_TOKENS], max_points=4)
    return float(tokens["value"].max()) if len(tokens) else None
