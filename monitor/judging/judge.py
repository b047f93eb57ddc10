"""Judging stored runs: load a run and its reference, judge them with the detection engine
(monitor/judging/engine.py), store what it finds. Detectors themselves never touch a store or the
alignment; the engine composes them, this module adds the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from monitor.alerting.config import IncidentConfig
from monitor.alerting.grouping import group, progress_from_marks
from monitor.detectors import REGISTRY
from monitor.judging.engine import DetectConfig, DetectionEngine, DetectResult, empty_series
from monitor.errors import GapwatchError
from monitor.schema import Clean, NotJudged, RunData, Severity

ProgressCallback = Callable[[str], None]
"""Told one line per phase of a long job ("loading run", "aligning", ...)."""


def quiet(_: str) -> None:
    """The progress callback that says nothing."""


def judge(run: RunData, reference: RunData | None, config: DetectConfig | None = None,
          progress: ProgressCallback = quiet) -> DetectResult:
    """Run the configured detectors over `run` (and its reference, aligned). Pure: no store."""
    return DetectionEngine(config).judge(run, reference, progress)


def judge_aligned(run: RunData, aligned_reference: RunData | None, config: DetectConfig | None = None,
                  progress: ProgressCallback = quiet) -> DetectResult:
    """`judge` for a reference already aligned onto the run's steps, as
    `align_pair(run, reference, axis=config.axis)` returns it: for a caller that needs the aligned
    pair too (the report's tables), so that a 1.4M-step pair is aligned once, not twice."""
    return DetectionEngine(config).judge_aligned(run, aligned_reference, progress)


def detect_stored(store, run: str, reference: str | None = None, config: DetectConfig | None = None,
                  write: bool = True, progress: ProgressCallback = quiet,
                  incidents: IncidentConfig | None = None) -> DetectResult:
    """Judge a stored run against `reference` (default: the reference recorded for the run) and,
    unless `write` is False, store the detections (upserted by run, detector, metric and first
    step), detector series, what could not be judged, and the worst severity among the incidents
    still open at the run's end (grouped by `incidents`, as `detect` lists them)."""
    if reference == run:
        raise GapwatchError(own_reference(run))
    engine = DetectionEngine(config)  # refuse bad settings before loading a million rows
    progress(f"loading {run}")
    run_data = store.load_run(run)
    if run_data.scalars.empty:
        raise GapwatchError(f"run {run!r} has no metrics to judge")
    reference = reference or run_data.info.reference
    ref_data = None
    if reference:
        if store.get_run(reference) is None:
            raise GapwatchError(missing_reference(reference, run, store))
        progress(f"loading {reference}")
        ref_data = store.load_run(reference)
        if ref_data.scalars.empty:
            raise GapwatchError(f"reference {reference!r} has no metrics to compare with")
    result = engine.judge(run_data, ref_data, progress)
    if write:
        names = [n for n in engine.names if n not in result.skipped]
        with store.atomic():
            if engine.config.replace:
                store.clear_detections(run, names)
            store.write_detections(result.detections)
            if len(result.series):
                store.write_derived(run, result.series)
            store.save_state(not_judged_state(run), {"reference": result.reference,
                                                     "to_step": int(run_data.scalars.index[-1]),
                                                     "not_judged": [n.to_dict() for n in result.not_judged],
                                                     "cleans": [_clean_row(c) for c in result.cleans]})
            still_open = [i for i in group(result.detections, progress_from_marks(run, store.run_marks(run).series),
                                           incidents, cleans=result.cleans) if not i.resolved]
            worst = max((i.severity for i in still_open), key=lambda s: s.rank, default=None)
            store.save_state(open_state(run), {"severity": worst.value if worst is not None else None})
    return result


def missing_reference(reference: str, run: str, store) -> str:
    """The error for a reference that is not in the store (named before it was imported, misspelt,
    or removed since)."""
    return (f"reference {reference!r} of {run!r} is not in {store.url.redacted()}: import it, or name another "
            f"(--reference NAME, or `gapwatch runs set-reference {run} NAME`)")


def own_reference(run: str) -> str:
    """The error for a run named as its own reference: judged against itself, it would always tie
    (`gapwatch runs set-reference` and the report refuse it in the same words)."""
    return f"run {run!r} cannot be its own reference"


NOT_JUDGED_STATE = "detect/{run}/not_judged"


def not_judged_state(run: str) -> str:
    """Name under which the store keeps what the last `detect` of `run` could not judge."""
    return NOT_JUDGED_STATE.format(run=run)


def open_state(run: str) -> str:
    """Name under which the store keeps the worst open incident of the last `detect` of `run`:
    small, so the runs table reads it for every run it shows."""
    return f"detect/{run}/open"


def open_severity(store, run: str) -> str | None:
    """The worst severity among the incidents the last stored `detect` of `run` left open (None:
    none open, or never judged by `detect`)."""
    saved = store.load_state(open_state(run))
    return (saved or {}).get("severity")


def judged_runs(store) -> set[str]:
    """The runs a stored `gapwatch detect` has judged."""
    head, tail = NOT_JUDGED_STATE.split("{run}")
    return {name.removeprefix(head).removesuffix(tail) for name in store.state_names(head) if name.endswith(tail)}


@dataclass(frozen=True)
class NotJudgedAsOf:
    """What the last stored `detect` of a run could not judge, and how far the run had got then."""

    items: tuple[NotJudged, ...]
    to_step: int | None
    """The run's last step when it was judged (None for a judgement stored without it)."""


def load_not_judged(store, run: str) -> NotJudgedAsOf | None:
    """What the last stored `detect` of `run` could not judge (None if it was never judged)."""
    saved = store.load_state(not_judged_state(run))
    if saved is None:
        return None
    return NotJudgedAsOf(tuple(NotJudged.from_dict(n) for n in saved.get("not_judged", [])), saved.get("to_step"))


def _clean_row(c: Clean) -> list:
    """A clean verdict as the detect state keeps it: what grouping needs, without its numbers."""
    return [c.detector, c.metric, int(c.start_step), int(c.end_step)]


def load_cleans(store, run: str) -> list[Clean]:
    """The clean verdicts of the last stored `detect` of `run`, for grouping its detections into
    the incidents the watch service would have made (empty if it was never judged)."""
    saved = store.load_state(not_judged_state(run))
    return [Clean(run, *row) for row in (saved or {}).get("cleans", [])]


def severity_counts(found: list) -> dict[str, int]:
    """How many of `found` (detections or incidents) are of each severity, the worst first."""
    counts = {s.value: 0 for s in sorted(Severity, key=lambda s: -s.rank)}
    for d in found:
        counts[d.severity.value] += 1
    return counts


__all__ = ["DetectConfig", "DetectResult", "REGISTRY", "detect_stored", "empty_series", "judge", "judge_aligned",
           "NotJudgedAsOf", "judged_runs", "load_cleans", "load_not_judged", "missing_reference", "open_severity",
           "own_reference", "severity_counts"]
