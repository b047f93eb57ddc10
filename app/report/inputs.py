"""From two stored runs to a ComparedPair: load, align, judge.

The report reads each run whole at full resolution (`store.load_run`): windows, checkpoints and
spike scores need every point. Detectors judge the run against the reference placed on the run's
steps, as the watch service does (monitor/watch/run_watcher.py), and the reference on its own with
the detectors that need no reference, so both runs' spikes, resumes and data can be set side by
side. The report writes nothing to the store.
"""

from __future__ import annotations

from collections.abc import Callable

from monitor import detectors as registry
from monitor.align import align_pair
from monitor.errors import GapwatchError
from monitor.schema import RunData

from app.report.pair import ComparedPair

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def load_pair(store, run: str, reference: str | None = None, axis: str = "auto",
              detector_names: list[str] | None = None, progress: Progress = _quiet) -> ComparedPair:
    """The stored run and its reference (given, else the one recorded with the run), compared."""
    info = store.get_run(run)
    if info is None:
        raise GapwatchError(f"no run named {run!r} in {store.url.redacted()}")
    reference = reference or info.get("reference")
    if not reference:
        raise GapwatchError(f"run {run!r} has no reference recorded; pass --reference NAME")
    if reference == run:
        raise GapwatchError(f"run {run!r} cannot be its own reference")
    progress(f"loading {run}")
    run_data = store.load_run(run)
    progress(f"loading {reference}")
    ref_data = store.load_run(reference)
    return compare(run_data, ref_data, axis=axis, detector_names=detector_names, progress=progress)


def compare(run: RunData, reference: RunData, axis: str = "auto", detector_names: list[str] | None = None,
            progress: Progress = _quiet) -> ComparedPair:
    """Align two runs and run the detectors on them."""
    if run.scalars.empty:
        raise GapwatchError(f"run {run.name!r} has no metrics to compare")
    if reference.scalars.empty:
        raise GapwatchError(f"reference {reference.name!r} has no metrics to compare")
    progress(f"aligning {run.name} with {reference.name}")
    aligned_run, aligned_ref = align_pair(run, reference, axis=axis)
    meta = aligned_run.info.config.get("alignment", {})
    judges = registry.build(detector_names)
    progress(f"judging {run.name} against {reference.name} ({len(judges)} detectors)")
    found = []
    for detector in judges:
        found += detector.detect(run, aligned_ref)
    progress(f"judging {reference.name} on its own")
    ref_found = []
    for detector in judges:
        if not detector.needs_reference:
            ref_found += detector.detect(reference, None)
    return ComparedPair(
        run=run, reference=reference, aligned_run=aligned_run, aligned_reference=aligned_ref,
        axis=meta.get("axis", "step"), axis_reason=meta.get("reason", ""),
        detections=found, reference_detections=ref_found,
    )
