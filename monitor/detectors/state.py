"""What a detector remembers between incremental updates, and its plain-JSON form.

The watch service saves every detector's state with its alerts, so a restarted service carries on
where it stopped. The JSON is strict (NaN and Inf as strings, unlogged cells as null) so that any
store or tool can hold it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from monitor.schema import Alignment, Clean, Detection, RunData, RunInfo, empty_events

from .rundata import make_run


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
