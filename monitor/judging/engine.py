"""The one detection engine: a configured set of detectors over a run and its reference, whole or
incrementally, producing detections, the series detectors emit (spike scores) and what they could
not judge. `gapwatch detect`, the watch service, the report and the demo all judge through it.

Whole (`judge`): the reference is aligned onto the run's steps (monitor.judging.align) and every detector
judges the run. Incrementally (`update`): each detector judges the rows that arrived since the last
call with what its state remembers (monitor/detectors/incremental.py: opted in, or a bounded tail by
default); detectors judge only units that later rows cannot change and their severities only grow,
so fed in any pieces the engine reaches the verdicts of a whole-run pass
(tests/monitor/watch/test_live_equals_offline.py proves it through the watch service).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from monitor.detectors import Detector, build
from monitor.detectors.incremental import (
    DetectorState,
    incremental,
    state_from_dict,
    state_to_dict,
)
from monitor.errors import GapwatchError
from monitor.judging.align import AXES, align_pair
from monitor.schema import Clean, Detection, NotJudged, RunData, empty_long


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
    """Also store the spike-score series (detect/spike_score/*) next to the detections, apart from
    the logged rows (Store.write_derived)."""
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
    cleans: list[Clean] = field(default_factory=list)
    """Units the detectors judged clean (their equivalence tests passed): what ends an incident."""

    @property
    def skipped(self) -> list[str]:
        """Detectors that judged nothing at all of this run."""
        return [n.detector for n in self.not_judged if n.metric is None]


@dataclass
class Update:
    """What one incremental step produced."""

    detections: list[Detection]
    """New or changed detections (an interval seen before comes back only when it changed)."""
    series: pd.DataFrame
    """Points of detector series for the rows judged (long: step, key, value)."""
    cleans: list[Clean] = field(default_factory=list)
    """Clean verdicts on the units these rows completed."""


def no_reference(name: str) -> NotJudged:
    return NotJudged(name, "it compares with a reference run and none was given")


class DetectionEngine:
    def __init__(self, config: DetectConfig | None = None) -> None:
        self.config = config or DetectConfig()
        if self.config.axis not in AXES:
            raise GapwatchError(f"axis must be one of {', '.join(AXES)}, not {self.config.axis!r}")
        try:
            self.detectors: list[Detector] = build(self.config.detectors, self.config.params)
        except KeyError as exc:
            raise GapwatchError(str(exc.args[0])) from None
        except (TypeError, ValueError) as exc:
            raise GapwatchError(f"detector settings: {exc}") from None
        # As the watch service runs them: opted in to incremental judging, or on its bounded defaults.
        self.incremental = [incremental(d) for d in self.detectors]

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.detectors]

    def fingerprint(self) -> dict[str, str]:
        """Per detector, the text of its parameters: a saved state is reused only under the same."""
        return {d.name: d.fingerprint() for d in self.detectors}

    # --- whole runs ----------------------------------------------------------------------------
    def judge(self, run: RunData, reference: RunData | None = None, progress=lambda _msg: None) -> DetectResult:
        """Every detector over the whole run, against the reference aligned onto its steps."""
        aligned = None
        if reference is not None:
            progress(f"aligning {run.name} with {reference.name}")
            _, aligned = self.align(run, reference)
        return self.judge_aligned(run, aligned, progress)

    def align(self, run: RunData, reference: RunData) -> tuple[RunData, RunData]:
        """The run and its reference on the run's steps, on this engine's axis (monitor.judging.align)."""
        return align_pair(run, reference, axis=self.config.axis)

    def judge_aligned(self, run: RunData, aligned: RunData | None, progress=lambda _msg: None) -> DetectResult:
        """Every detector over the whole run, against `aligned`: the reference as `align` puts it
        on the run's steps (None without a reference). A caller that needs the aligned pair
        itself (the report's tables) aligns once and judges with it."""
        axis = aligned.info.alignment.axis if aligned is not None and aligned.info.alignment else None
        found: list[Detection] = []
        cleans: list[Clean] = []
        not_judged: list[NotJudged] = []
        series = [empty_series()]
        for detector in self.detectors:
            if detector.needs_reference and aligned is None:
                not_judged.append(no_reference(detector.name))
                continue
            progress(detector.name)
            detections, emitted = detector.detect_with_series(run, aligned)
            found.extend(detections)
            cleans.extend(detector.clean(run, aligned))
            if self.config.write_series:
                series.append(emitted)
            not_judged.extend(detector.not_judged(run, aligned))
        found.sort(key=lambda d: (d.start_step, d.detector, d.metric))
        return DetectResult(run=run.name, reference=aligned.name if aligned is not None else None,
                            detections=found, series=pd.concat(series, ignore_index=True), not_judged=not_judged,
                            axis=axis, cleans=sorted(cleans, key=lambda c: (c.start_step, c.detector, c.metric)))

    # --- incrementally -------------------------------------------------------------------------
    def new_states(self) -> dict[str, DetectorState]:
        return {d.name: d.new_state() for d in self.incremental}

    def update(self, states: dict[str, DetectorState], rows: RunData, reference: RunData | None) -> Update:
        """Judge `rows` (what arrived since the last call) against `reference` (aligned onto the
        run's steps, None without one); `states` is updated in place."""
        found: list[Detection] = []
        cleans: list[Clean] = []
        series = [empty_series()]
        for detector in self.incremental:
            if detector.needs_reference and reference is None:
                continue
            state = states.get(detector.name) or detector.new_state()
            state.cleans = []
            state, emitted = detector.update(state, rows, reference)
            states[detector.name] = state
            found.extend(emitted)
            cleans.extend(state.cleans)
            state.cleans = []
            if state.series is not None:
                if self.config.write_series:
                    series.append(state.series)
                state.series = None
        return Update(found, pd.concat(series, ignore_index=True), cleans)

    @staticmethod
    def states_to_dict(states: dict[str, DetectorState]) -> dict[str, Any]:
        return {name: state_to_dict(s) for name, s in states.items()}

    @staticmethod
    def states_from_dict(data: dict[str, Any]) -> dict[str, DetectorState]:
        return {name: state_from_dict(s) for name, s in data.items()}


def empty_series() -> pd.DataFrame:
    return empty_long("step", "key", "value")
