"""Judging stored runs: load a run and its reference, align them, run the detectors, store what
they find. Detectors themselves never touch a store or the alignment; this module composes them.

Every detector sees the run as logged (all of its metrics) and the reference aligned onto the
run's steps (`monitor.align.align_pair`), so comparisons are made only between fair pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from monitor.align import AXES, align_pair
from monitor.detectors import REGISTRY, Detector, build
from monitor.detectors.spike import SpikeDetector
from monitor.errors import GapwatchError
from monitor.schema import Detection, NotJudged, RunData, Severity

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class DetectConfig:
    """Which detectors judge a run, and how."""

    detectors: list[str] | None = None
    """Registry names to run, in this order; None runs them all."""
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Constructor arguments per detector name, e.g. {"spike": {"threshold": 7.0}}."""
    axis: str = "auto"
    """Axis on which the run meets its reference: auto, step or tokens."""
    write_series: bool = True
    """Also store the spike-score series (detect/spike_score/*) next to the detections."""
    replace: bool = False
    """Forget the run's stored detections of these detectors before storing the new ones."""


@dataclass
class DetectResult:
    run: str
    reference: str | None
    detections: list[Detection]
    series: pd.DataFrame
    """Long frame (step, key, value) of detector series, such as spike scores."""
    not_judged: list[NotJudged]
    """What the detectors could not judge, and why (a detector that needs a reference and got
    none, a run too short for a window, no comparable checkpoints...)."""
    axis: str | None
    """Axis the reference was aligned on (None without a reference)."""

    @property
    def skipped(self) -> list[str]:
        """Detectors that judged nothing at all of this run."""
        return [n.detector for n in self.not_judged if n.metric is None]


def make_detectors(config: DetectConfig) -> list[Detector]:
    """The configured detectors; a bad name or argument is the user's error, in one line."""
    try:
        return build(config.detectors, config.params)
    except KeyError as exc:
        raise GapwatchError(str(exc.args[0])) from None
    except (TypeError, ValueError) as exc:
        raise GapwatchError(f"detector settings: {exc}") from None


def judge(run: RunData, reference: RunData | None, config: DetectConfig | None = None,
          progress: Progress = _quiet) -> DetectResult:
    """Run the configured detectors over `run` (and its reference, aligned). Pure: no store."""
    config = config or DetectConfig()
    if config.axis not in AXES:
        raise GapwatchError(f"axis must be one of {', '.join(AXES)}, not {config.axis!r}")
    detectors = make_detectors(config)
    aligned, axis = None, None
    if reference is not None:
        progress(f"aligning {run.name} with {reference.name}")
        _, aligned = align_pair(run, reference, axis=config.axis)
        axis = aligned.info.config.get("alignment", {}).get("axis")
    found: list[Detection] = []
    not_judged: list[NotJudged] = []
    series = [empty_series()]
    for detector in detectors:
        if detector.needs_reference and aligned is None:
            not_judged.append(NotJudged(detector.name, "it compares with a reference run and none was given"))
            continue
        progress(f"{detector.name}")
        not_judged.extend(detector.not_judged(run, aligned))
        if config.write_series and isinstance(detector, SpikeDetector):
            spikes, scores = detector.detect_with_scores(run, compact=True)
            found.extend(spikes)
            series.append(scores)
        else:
            found.extend(detector.detect(run, aligned))
    found.sort(key=lambda d: (d.start_step, d.detector, d.metric))
    return DetectResult(run=run.name, reference=reference.name if reference is not None else None,
                        detections=found, series=pd.concat(series, ignore_index=True), not_judged=not_judged,
                        axis=axis)


def detect_stored(store, run: str, reference: str | None = None, config: DetectConfig | None = None,
                  write: bool = True, progress: Progress = _quiet) -> DetectResult:
    """Judge a stored run against `reference` (default: the reference recorded for the run) and,
    unless `write` is False, store the detections (upserted by run, detector, metric and first
    step) and detector series."""
    config = config or DetectConfig()
    make_detectors(config)  # refuse bad settings before loading a million rows
    progress(f"loading {run}")
    run_data = store.load_run(run)
    if run_data.scalars.empty:
        raise GapwatchError(f"run {run!r} has no metrics to judge")
    reference = reference or run_data.info.reference
    ref_data = None
    if reference:
        progress(f"loading {reference}")
        ref_data = store.load_run(reference)
        if ref_data.scalars.empty:
            raise GapwatchError(f"reference {reference!r} has no metrics to compare with")
    result = judge(run_data, ref_data, config, progress)
    if write:
        names = [d.name for d in make_detectors(config) if d.name not in result.skipped]
        with store.atomic():
            if config.replace:
                store.clear_detections(run, names)
            store.write_detections(result.detections)
            if len(result.series):
                store.write_metrics(run, result.series)
            store.save_state(not_judged_state(run), {"reference": result.reference,
                                                     "not_judged": [n.to_dict() for n in result.not_judged]})
    return result


def not_judged_state(run: str) -> str:
    """Name under which the store keeps what the last `detect` of `run` could not judge."""
    return f"detect/{run}/not_judged"


def load_not_judged(store, run: str) -> list[NotJudged]:
    """What the last stored `detect` of `run` could not judge (empty if it was never judged)."""
    saved = store.load_state(not_judged_state(run))
    return [NotJudged.from_dict(n) for n in (saved or {}).get("not_judged", [])]


def empty_series() -> pd.DataFrame:
    return pd.DataFrame({"step": pd.Series(dtype="int64"), "key": pd.Series(dtype=str),
                         "value": pd.Series(dtype=float)})


def severity_counts(detections: list[Detection]) -> dict[str, int]:
    counts = {s.value: 0 for s in Severity}
    for d in detections:
        counts[d.severity.value] += 1
    return counts


__all__ = ["DetectConfig", "DetectResult", "REGISTRY", "detect_stored", "judge", "load_not_judged",
           "make_detectors", "severity_counts"]
