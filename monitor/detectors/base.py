"""What every detector shares.

A detector is configured once (every threshold a named constructor argument) and then judges
runs: `detect(run, reference)` over whole runs, or `update(state, new_rows, reference)` as rows
arrive, for the watch service. The incremental state is a small dataclass whose `state_to_dict`
form is plain JSON, so a restarted service carries on where it stopped.

The default `update` keeps a tail of recent rows (as much history as the detector's windows need,
`lookback`), re-judges tail + new rows with `detect`, and reconciles the result with what it has
already reported: an interval that continues across updates keeps its first step (the identity
under which the store upserts it), and nothing already reported is reported again unchanged.
Detectors whose judgement needs all of history (the eval ones) keep all of their sparse rows.
"""

from __future__ import annotations

import abc
import inspect
import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from monitor.schema import Detection, NotJudged, RunData, RunInfo, Severity, empty_events

from .stats import cadence


class Detector(abc.ABC):
    """Base of all detectors: parameters in the constructor, `detect`, and incremental `update`."""

    name: ClassVar[str] = ""
    needs_reference: ClassVar[bool] = False  # silent (returns []) without a reference run
    reads_reference: ClassVar[bool] = True  # False: the reference is never looked at
    keep_first_row: ClassVar[bool] = False  # incremental tail always keeps the run's first row

    # --- configuration -----------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """The constructor arguments this detector was built with (for reports and state)."""
        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters if k != "self"}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    # --- batch ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def detect(self, run: RunData, reference: RunData | None = None) -> list[Detection]:
        """Every interval in which this detector sees `run` misbehave (sorted by start step)."""

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        """What of `run` this detector could not judge, and why; empty when it judged everything
        it reads (its silence then means "clean")."""
        return []

    # --- what the incremental mode must keep ---------------------------------------------------
    def columns(self, run: RunData) -> list[str]:
        """The metric columns this detector reads (the incremental tail keeps only these)."""
        return list(run.scalars.columns)

    def lookback(self, step_cadence: float) -> float | None:
        """Steps of history needed to judge new rows; None keeps every row of `columns`."""
        return None

    def merge_gap(self, step_cadence: float) -> float:
        """How close a new interval must start to an open one to be its continuation."""
        return step_cadence

    def reference_spans(self, lo: float, hi: float, step_cadence: float) -> list[tuple[float, float]]:
        """Ranges of reference steps needed to judge run rows lo..hi."""
        back = self.lookback(step_cadence)
        return [((-math.inf if back is None else lo - back), hi)]

    # --- incremental ---------------------------------------------------------------------------
    def new_state(self) -> "DetectorState":
        return DetectorState(detector=self.name)

    def update(self, state: "DetectorState", new_rows: RunData,
               reference: RunData | None = None) -> tuple["DetectorState", list[Detection]]:
        """Judge `new_rows` given what `state` remembers; returns the new state and the
        detections that are new or changed since the last call (same start step = same
        detection, to be upserted)."""
        cols = self.columns(new_rows)
        fresh = restrict_columns(new_rows, cols)
        if fresh.scalars.empty and fresh.events.empty and fresh.repeats.empty:
            return state, []  # nothing this detector reads has arrived
        combined = fresh if state.tail is None else concat_rows(state.tail, fresh)
        if combined.scalars.empty and combined.events.empty:
            return state, []
        step_cadence = cadence(combined.scalars.index.to_numpy())
        lo, hi = _span(combined)
        ref = None
        if reference is not None and self.reads_reference:
            ref = slice_ranges(reference, self.reference_spans(lo, hi, step_cadence), cols)
        found = self.detect(combined, ref)
        emitted = reconcile(state, found, self.merge_gap(step_cadence))
        back = self.lookback(step_cadence)
        state.tail = combined if back is None else trim_rows(combined, hi - back, self.keep_first_row)
        state.last_step = int(hi)
        _prune(state)
        return state, emitted

    # --- helpers for subclasses ----------------------------------------------------------------
    def _detection(self, run: RunData, reference: RunData | None, metric: str, start: int,
                   end: int, peak: int, score: float, severity: Severity, message: str,
                   evidence: dict[str, Any]) -> Detection:
        return Detection(
            run=run.name, detector=self.name, metric=metric, start_step=int(start),
            end_step=int(end), peak_step=int(peak), score=float(score), severity=severity,
            message=message, evidence=evidence,
            reference=reference.name if reference is not None else None,
        )


@dataclass
class DetectorState:
    """What a detector remembers between incremental updates.

    detector:  the registry name it belongs to.
    last_step: the highest step judged so far.
    tail:      recent rows (only the detector's columns) that the next judgement needs.
    open:      per metric and rule, the latest reported interval, which new rows may continue.
    reported:  fingerprints of intervals already reported, so unchanged ones are not repeated.
    extra:     detector-specific JSON values.
    """

    detector: str
    last_step: int | None = None
    tail: RunData | None = None
    open: dict[str, Detection] = field(default_factory=dict)
    reported: dict[str, list] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


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


# --- reconciling a re-judged tail with what was already reported ---------------------------------
def _key(d: Detection) -> str:
    return f"{d.metric}@{d.start_step}"


def _thread(d: Detection) -> str:
    """Which open interval a detection may continue: same metric and same rule (a detector with
    several rules on one metric tags each detection's evidence with `rule`)."""
    return f"{d.metric}|{d.evidence.get('rule', '')}"


def _fingerprint(d: Detection) -> list:
    return [int(d.end_step), int(d.peak_step), d.severity.value, round(float(d.score), 9)]


def _merge(old: Detection, new: Detection) -> Detection:
    """`new` continues `old` (it was cut by the start of the tail): keep old's first step."""
    best = new if new.score > old.score else old  # on a tie the first peak stands, as in detect
    severity = max(old.severity, new.severity, key=lambda s: s.rank)
    return Detection(
        run=new.run, detector=new.detector, metric=new.metric, start_step=old.start_step,
        end_step=max(old.end_step, new.end_step), peak_step=best.peak_step, score=best.score,
        severity=severity, message=best.message, evidence=best.evidence,
        reference=new.reference, attempt=new.attempt,
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


def _prune(state: DetectorState) -> None:
    """Forget intervals that ended before the tail: no new row can change them any more."""
    if state.tail is None:
        return
    first = _span(state.tail)[0]
    state.open = {m: d for m, d in state.open.items() if d.end_step >= first}
    state.reported = {k: fp for k, fp in state.reported.items() if fp[0] >= first}


def _unplain_detection(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    if isinstance(d.get("score"), str):
        d["score"] = float(d["score"])
    return d


# --- RunData pieces ------------------------------------------------------------------------------
def _span(run: RunData) -> tuple[float, float]:
    """First and last step of anything in the run (scalars are sorted; events need not be)."""
    ends = []
    if len(run.scalars):
        ends += [float(run.scalars.index[0]), float(run.scalars.index[-1])]
    if len(run.events):
        ev = run.events["step"].to_numpy()
        ends += [float(ev.min()), float(ev.max())]
    return (min(ends), max(ends)) if ends else (0.0, 0.0)


def finite(run: RunData, key: str) -> pd.Series:
    """The finite values of one metric, by step (unlogged cells and logged NaN/Inf dropped)."""
    if key not in run.scalars.columns:
        return pd.Series(dtype=float, index=pd.Index([], dtype="int64", name="step"), name=key)
    col = run.scalars[key]
    ok = np.isfinite(col.to_numpy(dtype=float))
    return col if ok.all() else col[ok]


def make_run(info: RunInfo | str, scalars: pd.DataFrame, events: pd.DataFrame | None = None,
             repeats: pd.DataFrame | None = None,
             logged_nonfinite: pd.DataFrame | None = None) -> RunData:
    """A RunData with the index and column types detectors rely on."""
    if isinstance(info, str):
        info = RunInfo(name=info)
    scalars = scalars.copy()
    scalars.index = pd.Index(scalars.index.to_numpy(dtype="int64"), name="step")
    run = RunData(info=info, scalars=scalars.sort_index())
    if events is not None:
        run.events = events
    if repeats is not None:
        run.repeats = repeats
    if logged_nonfinite is not None:
        run.logged_nonfinite = logged_nonfinite
    return run


def restrict_columns(run: RunData, cols: list[str]) -> RunData:
    """Only `cols` (those the run has), and only rows where one of them was logged."""
    cols = [c for c in cols if c in run.scalars.columns]
    scalars = run.scalars[cols]
    logged = ~np.isnan(scalars.to_numpy(dtype=float)).all(axis=1) if cols else np.zeros(len(scalars), dtype=bool)
    nf = run.logged_nonfinite
    if len(nf):
        nf = nf[nf["key"].isin(cols)]
        logged |= scalars.index.isin(nf["step"])
    if not logged.all():
        scalars = scalars[logged]
    rep = run.repeats
    if len(rep):
        rep = rep[rep["key"].isin(cols)]
    return RunData(info=run.info, scalars=scalars, events=run.events, repeats=rep, logged_nonfinite=nf)


def concat_rows(old: RunData, new: RunData) -> RunData:
    """Old rows then new ones; where both logged a (step, key), the new value wins."""
    a, b = old.scalars, new.scalars
    if a.empty:
        scalars = b
    elif b.empty:
        scalars = a
    elif a.index[-1] < b.index[0]:
        scalars = pd.concat([a, b], axis=0)  # the usual case: rows only ever appended
    else:
        scalars = b.combine_first(a).sort_index()
    scalars.index.name = "step"
    events = old.events
    if len(new.events):
        events = _cat(old.events, new.events).sort_values("step", kind="stable").reset_index(drop=True)
    nf = old.logged_nonfinite
    if len(new.logged_nonfinite):
        nf = _cat(nf, new.logged_nonfinite).drop_duplicates(["key", "step"], keep="last").reset_index(drop=True)
    repeats = old.repeats if new.repeats.empty else _cat(old.repeats, new.repeats).reset_index(drop=True)
    return RunData(info=new.info, scalars=scalars, events=events, repeats=repeats, logged_nonfinite=nf)


def _cat(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    if a.empty:
        return b
    if b.empty:
        return a
    return pd.concat([a, b], ignore_index=True)


def slice_rows(run: RunData, lo: float, hi: float) -> RunData:
    """Rows with lo <= step <= hi (scalars, events, repeats and logged NaN/Inf alike)."""
    idx = run.scalars.index
    # Integer bounds: a float searched in an int64 index makes NumPy cast the whole index.
    a = int(idx.searchsorted(math.ceil(lo), side="left")) if math.isfinite(lo) else 0
    b = int(idx.searchsorted(math.floor(hi), side="right")) if math.isfinite(hi) else len(idx)
    return RunData(info=run.info, scalars=run.scalars.iloc[a:b], events=_between(run.events, lo, hi),
                   repeats=_between(run.repeats, lo, hi), logged_nonfinite=_between(run.logged_nonfinite, lo, hi))


def slice_ranges(run: RunData, ranges: list[tuple[float, float]], cols: list[str] | None = None) -> RunData:
    """Rows in any of the (lo, hi) ranges (which may overlap), only `cols` when given."""
    merged: list[list[float]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    parts = [slice_rows(run, lo, hi) for lo, hi in merged]
    if cols is not None:
        parts = [_only_columns(p, cols) for p in parts]
    if len(parts) == 1:
        return parts[0]
    out = parts[0]
    for part in parts[1:]:
        out = concat_rows(out, part)
    return out


def _only_columns(run: RunData, cols: list[str]) -> RunData:
    """`cols` only, rows kept as they are (cheaper than restrict_columns for a reference)."""
    cols = [c for c in cols if c in run.scalars.columns]
    nf, rep = run.logged_nonfinite, run.repeats
    return RunData(info=run.info, scalars=run.scalars[cols], events=run.events,
                   repeats=rep[rep["key"].isin(cols)] if len(rep) else rep,
                   logged_nonfinite=nf[nf["key"].isin(cols)] if len(nf) else nf)


def _between(frame: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    if frame.empty:
        return frame
    steps = frame["step"].to_numpy()
    keep = (steps >= lo) & (steps <= hi)
    return frame if keep.all() else frame[keep]


def trim_rows(run: RunData, keep_from: float, keep_first_row: bool = False) -> RunData:
    """Drop rows before `keep_from` (optionally keeping the run's very first row)."""
    kept = slice_rows(run, keep_from, math.inf)
    if keep_first_row and len(run.scalars) and run.scalars.index[0] < keep_from:
        kept.scalars = pd.concat([run.scalars.iloc[:1], kept.scalars])
    return kept


# --- JSON form of a RunData tail ------------------------------------------------------------------
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
    return make_run(RunInfo(**data["info"]), scalars, events=events, repeats=repeats, logged_nonfinite=nf)
