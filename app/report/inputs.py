"""From two stored runs to a ComparedPair: load, align, judge (or a run without a reference: load,
judge it alone, `alone`).

The report reads each run whole at full resolution (`store.load_run`): windows, checkpoints and
spike scores need every point. Detection is monitor.judging.judge's, as `gapwatch detect` runs it:
the run against its reference (on the pair aligned for the tables, `judge_aligned`), and the
reference on its own (the detectors that need no reference, in a forked second process when a core
is free: monitor/judging/side_process.py), so both runs' spikes, resumes and data can be set side
by side. The report writes nothing to the store.
"""

from __future__ import annotations

from dataclasses import replace

from monitor.alerting.config import IncidentConfig
from monitor.judging.align import align_pair
from monitor.judging.engine import no_reference
from monitor.judging.judge import (
    DetectConfig,
    ProgressCallback,
    judge,
    judge_aligned,
    missing_reference,
    own_reference,
    quiet,
)
from monitor.judging.side_process import SidePass
from monitor.errors import GapwatchError
from monitor.schema import RunData

from app.report.pair import ComparedPair

def load_pair(store, run: str, reference: str | None = None, detect: DetectConfig | None = None,
              incidents: IncidentConfig | None = None, progress: ProgressCallback = quiet) -> ComparedPair:
    """The stored run and its reference (given, else the one recorded with the run), compared."""
    info = store.get_run(run)
    if info is None:
        raise GapwatchError(f"no run named {run!r} in {store.url.redacted()}")
    reference = reference or info.get("reference")
    if not reference:
        progress(f"loading {run} (no reference recorded: a report of the run alone)")
        return alone(store.load_run(run), detect=detect, incidents=incidents, progress=progress)
    if reference == run:
        raise GapwatchError(own_reference(run))
    if store.get_run(reference) is None:
        raise GapwatchError(missing_reference(reference, run, store))
    progress(f"loading {run}")
    run_data = store.load_run(run)
    progress(f"loading {reference}")
    ref_data = store.load_run(reference)
    return compare(run_data, ref_data, detect=detect, incidents=incidents, progress=progress)


def compare(run: RunData, reference: RunData, detect: DetectConfig | None = None,
            incidents: IncidentConfig | None = None, progress: ProgressCallback = quiet) -> ComparedPair:
    """Align two runs for the tables and judge them with the detectors (set up by `detect`; their
    findings grouped into incidents by `incidents`, as a watch service with those settings does)."""
    detect = replace(detect or DetectConfig(), write_series=True)
    if run.scalars.empty:
        raise GapwatchError(f"run {run.name!r} has no metrics to compare")
    if reference.scalars.empty:
        raise GapwatchError(f"reference {reference.name!r} has no metrics to compare")
    # Once, for the tables and the detectors alike: the tables show the pair that was judged.
    progress(f"aligning {run.name} with {reference.name}")
    aligned_run, aligned_ref = align_pair(run, reference, axis=detect.axis)
    meta = aligned_run.info.alignment
    progress(f"judging {reference.name} on its own (beside the next pass, where a core is free)")
    alone_pass = SidePass(lambda: judge(reference, None, detect))
    progress(f"judging {run.name} against {reference.name}")
    judged = judge_aligned(run, aligned_ref, detect, lambda m: progress(f"  {m}"))
    alone = alone_pass.result()
    return ComparedPair(
        run=run, reference=reference, aligned_run=aligned_run, aligned_reference=aligned_ref,
        axis=meta.axis if meta else "step", axis_reason=meta.reason if meta else "",
        detections=judged.detections, reference_detections=alone.detections, cleans=judged.cleans + alone.cleans,
        not_judged={run.name: judged.not_judged,
                    reference.name: [n for n in alone.not_judged if n != no_reference(n.detector)]},
        detector_series={run.name: judged.series, reference.name: alone.series}, detect=detect,
        incidents=incidents or IncidentConfig(),
    )


def alone(run: RunData, detect: DetectConfig | None = None, incidents: IncidentConfig | None = None,
          progress: ProgressCallback = quiet) -> ComparedPair:
    """The run judged on its own (as `gapwatch detect` judges a run without a reference): its
    spikes, NaNs, resumes, data and throughput; the detectors that compare say they were not judged."""
    detect = replace(detect or DetectConfig(), write_series=True)
    if run.scalars.empty:
        raise GapwatchError(f"run {run.name!r} has no metrics to report")
    progress(f"judging {run.name} on its own")
    judged = judge(run, None, detect, lambda m: progress(f"  {m}"))
    return ComparedPair(
        run=run, reference=None, aligned_run=run, aligned_reference=None, axis="step",
        axis_reason="the run alone, on its own steps", detections=judged.detections, cleans=judged.cleans,
        not_judged={run.name: judged.not_judged}, detector_series={run.name: judged.series}, detect=detect,
        incidents=incidents or IncidentConfig(),
    )
