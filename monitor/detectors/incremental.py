"""Incremental judging, opt in: what a detector keeps between the pieces of a growing run.

The watch service judges rows as they arrive with `update(state, new_rows, reference)`: it keeps a
tail of recent rows, judges tail + new rows (`judge_tail`, by default `detect` on them), and
reconciles the result with what it has already reported: an interval that continues across
updates keeps its first step (the identity under which the store upserts it), and nothing already
reported is reported again unchanged.

A detector that says nothing about its history is run with this mixin's defaults (`incremental`
wraps it): the last `DEFAULT_HISTORY_POINTS` logged values of each column it reads, so its state
and its update cost stay bounded however long the run. A detector whose verdicts need more, or
facts older than its tail, mixes in `Incremental` and overrides the hooks it needs:
`history_points` / `keep_from` (what the tail keeps), `settled_before` and `merge_gap` (how a
re-judged tail meets what was reported), `pin` / `carry` (facts about dropped rows),
`keep_first_row`, `reads_events`, `cadence_points`, and `judge_tail` (how tail + new rows are judged).

What a detector remembers between updates is a `DetectorState`; the watch service saves it with
its alerts, so a restarted service carries on where it stopped. Its JSON form is strict (NaN and Inf
as strings, unlogged cells as null) so that any store or tool can hold it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from monitor.schema import (
    Alignment,
    Clean,
    CleanRule,
    Detection,
    RunData,
    RunInfo,
    empty_events,
)

from .base import ReferenceUse, interval_key, reference_view
from .rundata import (
    concat_rows,
    last_points_from,
    logging_interval,
    make_run,
    restrict_columns,
    span,
    trim_columns,
    with_pinned,
)
from .stats import cadence


@dataclass
class DetectorState:
    """What a detector remembers between incremental updates.

    detector:  the registry name it belongs to.
    last_step: the highest step judged so far.
    tail:      recent rows (only the detector's columns) that the next judgement needs.
    open:      per metric and rule, the latest reported interval, which new rows may continue.
    reported:  fingerprints of intervals already reported, so unchanged ones are not repeated.
    extra:     detector-specific JSON values.
    series:    points of detector series produced by the last update (the spike scores of the new
               rows), for the engine to collect; not part of the saved state.
    cleans:    clean verdicts of the last update, for the engine to collect; not saved either.
    """

    detector: str
    last_step: int | None = None
    tail: RunData | None = None
    open: dict[str, Detection] = field(default_factory=dict)
    reported: dict[str, list] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    series: pd.DataFrame | None = None
    cleans: list[Clean] = field(default_factory=list)


def state_to_dict(state: DetectorState) -> dict[str, Any]:
    """Plain-JSON form of a state (NaN and Inf as strings, unlogged cells as null)."""
    return {
        "detector": state.detector,
        "last_step": state.last_step,
        "tail": None if state.tail is None else run_to_dict(state.tail),
        "open": {k: d.to_dict() for k, d in state.open.items()},
        "reported": state.reported,
        "extra": state.extra,
    }


def state_from_dict(data: dict[str, Any]) -> DetectorState:
    return DetectorState(
        detector=data["detector"],
        last_step=data.get("last_step"),
        tail=None if data.get("tail") is None else run_from_dict(data["tail"]),
        open={k: Detection.from_dict(_unplain_detection(v)) for k, v in data.get("open", {}).items()},
        reported=dict(data.get("reported", {})),
        extra=dict(data.get("extra", {})),
    )


def _unplain_detection(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    if isinstance(d.get("score"), str):
        d["score"] = float(d["score"])
    return d


def _enc(v: float) -> Any:
    if v != v:  # NaN: a cell the run did not log
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def _dec(v: Any) -> float:
    return float("nan") if v is None else float(v)


def run_to_dict(run: RunData) -> dict[str, Any]:
    sc = run.scalars
    nf = run.logged_nonfinite
    return {
        "info": asdict(run.info),
        "steps": sc.index.to_numpy(dtype="int64").tolist(),
        "columns": {k: [_enc(v) for v in sc[k].to_numpy(dtype=float)] for k in sc.columns},
        "logged_nonfinite": [[k, int(s), str(float(v))] for k, s, v in
                             zip(nf["key"], nf["step"], nf["value"])],
        "events": [
            {"step": int(r.step), "kind": str(r.kind), "attempt": int(r.attempt) if r.attempt == r.attempt else None,
             "payload": r.payload}
            for r in run.events.itertuples(index=False)
        ],
        "repeats": [[k, int(s), int(a), _enc(float(v))] for k, s, a, v in
                    zip(run.repeats["key"], run.repeats["step"], run.repeats["attempt"], run.repeats["value"])],
    }


def run_from_dict(data: dict[str, Any]) -> RunData:
    steps = pd.Index(np.asarray(data["steps"], dtype="int64"), name="step")
    scalars = pd.DataFrame({k: np.array([_dec(v) for v in vals], dtype=float)
                            for k, vals in data["columns"].items()}, index=steps)
    nf = pd.DataFrame(data["logged_nonfinite"], columns=["key", "step", "value"]) if data["logged_nonfinite"] else None
    if nf is not None:
        nf["step"] = nf["step"].astype("int64")
        nf["value"] = nf["value"].astype(float)
    events = pd.DataFrame(data["events"]) if data["events"] else empty_events()
    if data["events"]:
        events["step"] = events["step"].astype("int64")
    repeats = None
    if data["repeats"]:
        repeats = pd.DataFrame(data["repeats"], columns=["key", "step", "attempt", "value"])
        repeats["value"] = repeats["value"].map(_dec)
    info = dict(data["info"])
    if isinstance(info.get("alignment"), dict):
        info["alignment"] = Alignment(**info["alignment"])
    return make_run(RunInfo(**info), scalars, events=events, repeats=repeats, logged_nonfinite=nf)


DEFAULT_HISTORY_POINTS = 1_000
"""Logged values per column kept by a detector that names no history: windows of up to 1,000
values (the OLMo 2 spike rule's) are judged whole, and the state does not grow with the run; a
detector that needs more says so in `history_points`."""


class Incremental:
    """The incremental hooks with bounded defaults; mixed into a `Detector` (which supplies
    `name`, `columns`, `detect`, `clean` and `clean_rule`)."""

    keep_first_row: ClassVar[bool] = False
    """The tail always keeps the run's first row (a fact fixed by it, such as a cursor's offset)."""
    reads_events: ClassVar[bool] = True
    """Whether its verdicts read the run's events; a detector that reads only values keeps none."""
    cadence_points: ClassVar[int | None] = None
    """Logged points whose logging interval cuts its windows, pinned once known (None: none);
    detectors that have one make it a field."""

    def history_points(self, column: str) -> int | None:
        """Logged values of `column` that a verdict on new rows depends on, counted back from the
        newest (None: all of them). Counted in points, not steps, so a metric logged every 10
        steps keeps as much of its own history as one logged every step."""
        return DEFAULT_HISTORY_POINTS

    def keep_from(self, run: RunData) -> dict[str, float]:
        """The first step of each column that the incremental tail must keep."""
        return {c: last_points_from(run, c, self.history_points(c)) for c in run.scalars.columns}

    def settled_before(self, run: RunData, first_new: float) -> float:
        """Detections ending before this step were settled by earlier updates: the first new row's
        step, less the widest window this detector judges (a window can become complete, and a run
        of windows persistent, with rows of the next one)."""
        return first_new

    def merge_gap(self, step_cadence: float) -> float:
        """How close a new interval must start to an open one to be its continuation."""
        return step_cadence

    def pin(self, run: RunData, pinned: dict) -> dict:
        """Facts about rows the tail is about to drop that later judgements still need, merged into
        what earlier updates pinned (handed to `detect` through rundata.pinned). The default pins
        the logging intervals (rundata.logging_interval) over `cadence_points`, once the run has
        logged enough to know them."""
        if self.cadence_points is None:
            return pinned
        for column in self.columns(run):
            key = interval_key(column, self.cadence_points)
            if key not in pinned:
                value = logging_interval(run, column, self.cadence_points)
                if value is not None:
                    pinned[key] = value
        return pinned

    def carry(self, run: RunData, keep_from: dict[str, float], pinned: dict) -> dict:
        """What the rows about to be dropped (before `keep_from`) leave behind for later verdicts,
        merged into `pinned`; the default needs nothing beyond the logging intervals."""
        return pinned

    def new_state(self) -> DetectorState:
        return DetectorState(detector=self.name)

    def update(self, state: DetectorState, new_rows: RunData,
               reference: RunData | None = None) -> tuple[DetectorState, list[Detection]]:
        """Judge `new_rows` given what `state` remembers; returns the new state and the
        detections that are new or changed since the last call (same start step = same
        detection, to be upserted).

        Detectors judge only units (windows, blocks, checkpoints) that later rows cannot change, and
        their severities only grow with more evidence, so judging the tail again reaches, for every
        unit, the verdict a pass over the whole run reaches (the property test in
        tests/monitor/watch/ checks it through the watch service)."""
        cols = self.columns(new_rows)
        fresh = restrict_columns(new_rows, cols)
        if not self.reads_events:
            fresh = dataclasses.replace(fresh, events=fresh.events.iloc[:0])
        if fresh.scalars.empty and fresh.events.empty and fresh.repeats.empty:
            return state, []  # nothing this detector reads has arrived
        combined = fresh if state.tail is None else concat_rows(state.tail, fresh)
        if combined.scalars.empty and combined.events.empty:
            return state, []
        lo, hi = span(combined)
        ref = None
        if reference is not None and self.reference_use is not ReferenceUse.NONE:
            ref = reference_view(reference, lo, hi, cols)
        found, view = self.judge_tail(state, combined, fresh, ref)
        emitted = reconcile(state, found, self.merge_gap(cadence(combined.scalars.index.to_numpy())))
        keep = self.keep_from(view)
        state.extra["pinned"] = self.carry(view, keep, state.extra.get("pinned", {}))
        state.tail = trim_columns(combined, keep, self.keep_first_row)
        state.last_step = int(hi)
        prune(state)
        return state, emitted

    def judge_tail(self, state: DetectorState, combined: RunData, fresh: RunData,
                   ref: RunData | None) -> tuple[list[Detection], RunData]:
        """The detections of tail + new rows that are news, and the rows as judged (with what is
        pinned); clean verdicts and emitted series go in `state`. The default judges with `detect`
        and drops what earlier updates settled."""
        pinned = self.pin(with_pinned(combined, state.extra.get("pinned", {})), dict(state.extra.get("pinned", {})))
        state.extra["pinned"] = pinned
        view = with_pinned(combined, pinned)
        found = self.detect(view, ref)
        if state.last_step is not None:
            # Rows judged before were judged with all the history they needed; judged again at the
            # start of a shorter tail they may not be. A detection that ends before the new rows
            # could change is such an artifact, not news: a new one, or one reported then whose
            # score now drifts with the history it lost (a trailing median over fewer rows).
            settled = self.settled_before(view, span(fresh)[0])
            found = [d for d in found if d.end_step >= settled]
        if self.clean_rule is CleanRule.CLEAN_VERDICTS:
            state.cleans = self._new_cleans(state, view, ref, span(fresh)[0])
        return found, view

    def _new_cleans(self, state: DetectorState, view: RunData, ref: RunData | None, first_new: float) -> list[Clean]:
        """Clean verdicts on units that the new rows completed: those a whole-run pass reaches too
        (units settled before were judged, with all their history, by an earlier update)."""
        settled = self.settled_before(view, first_new) if state.last_step is not None else -math.inf
        return [c for c in self.clean(view, ref) if c.end_step >= settled]


class _Defaults(Incremental):
    """A detector that did not opt in, run with the defaults."""

    def __init__(self, detector) -> None:
        self.detector = detector

    def __getattr__(self, name: str):
        return getattr(self.detector, name)


def incremental(detector) -> Incremental:
    """The detector as the watch service runs it: itself when it mixes in `Incremental`, else
    wrapped with the bounded defaults."""
    return detector if isinstance(detector, Incremental) else _Defaults(detector)


# --- reconciling a re-judged tail with what was already reported ---------------------------------
def _key(d: Detection) -> str:
    return f"{d.metric}@{d.start_step}"


def _thread(d: Detection) -> str:
    """Which open interval a detection may continue: same metric and same rule (a detector with
    several rules on one metric tags each detection's evidence with `rule`)."""
    return f"{d.metric}|{d.evidence.get('rule', '')}"


def _fingerprint(d: Detection) -> list:
    # The message too: a spike that came back at the first value of a piece ends where it did,
    # but now reads "recovered", not "not recovered yet".
    return [int(d.end_step), int(d.peak_step), d.severity.value, round(float(d.score), 9), d.message]


def _merge(old: Detection, new: Detection) -> Detection:
    """`new` continues `old` (it was cut by the start of the tail): keep old's first step."""
    best = new if new.score > old.score else old  # on a tie the first peak stands, as in detect
    severity = max(old.severity, new.severity, key=lambda s: s.rank)
    return Detection(
        run=new.run, detector=new.detector, metric=new.metric, start_step=old.start_step,
        end_step=max(old.end_step, new.end_step), peak_step=best.peak_step, score=best.score,
        severity=severity, message=best.message, evidence=best.evidence,
        reference=new.reference, attempt=new.attempt, known_step=min(old.known_at, new.known_at),
    )


def reconcile(state: DetectorState, found: list[Detection], gap: float) -> list[Detection]:
    """Record `found` in `state`; return those not reported before (or changed since)."""
    emitted = []
    for d in sorted(found, key=lambda x: (x.metric, x.start_step)):
        thread = _thread(d)
        prior = state.open.get(thread)
        if prior is not None and prior.start_step < d.start_step <= prior.end_step + gap:
            d = _merge(prior, d)
        key, fp = _key(d), _fingerprint(d)
        if state.reported.get(key) != fp:
            emitted.append(d)
            state.reported[key] = fp
        if prior is None or d.end_step >= prior.end_step:
            state.open[thread] = d
    return sorted(emitted, key=lambda x: (x.start_step, x.metric))


def prune(state: DetectorState) -> None:
    """Forget intervals that ended before the tail: no new row can change them any more."""
    if state.tail is None:
        return
    first = span(state.tail)[0]
    state.open = {m: d for m, d in state.open.items() if d.end_step >= first}
    state.reported = {k: fp for k, fp in state.reported.items() if fp[0] >= first}

__all__ = ["DEFAULT_HISTORY_POINTS", "Incremental", "incremental", "prune", "reconcile"]
