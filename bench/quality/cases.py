"""The detection-quality benchmark's cases: every fault under every cadence on every pair of one
half, judged whole (as `gapwatch detect` judges) and, for the latency, fed in pieces (as the watch
service sees the run: rows in step order, held-out rows late where the cadence says so)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from monitor.judging.align import align_pair
from monitor.judging.judge import DetectConfig, judge
from monitor.judging.engine import DetectionEngine
from monitor.detectors.memorization import UNDECIDED
from monitor.detectors.rundata import slice_rows
from monitor.schema import RunData

from . import corpus, faults
from .told import Told, replay

COMPARING = ("reference_divergence", "heldout_divergence", "memorization", "memorization_trend")
SINGLE = ("spike", "nonfinite", "throughput", "grad_norm_growth", "data_invariants", "resume")
# Pieces the latency is measured with: the watch service reads what arrived every poll; 50 steps
# a poll is under a minute of a fast run.
PIECE_STEPS = 50


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[RunData], RunData] | None
    expected: tuple[str, ...]
    """Detectors that must catch it (any of them)."""
    forbidden: tuple[str, ...]
    """Detectors that must not call it (memorization for a run that is merely worse or better)."""
    truth: str | None = None
    """The story its incident must tell (None: nothing to tell)."""
    persists: bool = True
    """Once in, it never goes away (a drift); False: a transient fault whose incident must resolve."""


def pair_faults() -> list[Fault]:
    out = [Fault("clean", None, (), COMPARING)]
    for g in (0.03, 0.05, 0.1, 0.25):
        out.append(Fault(f"memorization {g:g}", faults.memorization(g), ("memorization",), (), "memorization"))
    for g in (0.03, 0.06, 0.1):
        out.append(Fault(f"worse {g:g}", faults.worse(g), ("reference_divergence", "heldout_divergence"),
                         ("memorization", "memorization_trend"), "divergence"))
    for g in (0.03, 0.05, 0.1, 0.25):
        out.append(Fault(f"improvement {g:g}", faults.improvement(g), ("reference_divergence",),
                         ("memorization", "memorization_trend"), "divergence"))
    return out


def single_faults() -> list[Fault]:
    return [Fault("loss spike 2x", faults.spike, ("spike",), (), "instability", persists=False),
            Fault("NaN loss", faults.nan, ("nonfinite",), (), "instability", persists=False),
            Fault("stall 20x", faults.stall, ("throughput",), (), "throughput", persists=False),
            Fault("grad norm grows 3x", faults.grad_growth, ("grad_norm_growth",), (), "instability"),
            Fault("loader skips a batch", faults.data_skip, ("data_invariants",), (), "data"),
            Fault("resume off by one", faults.resume_off_by_one, ("resume",), (), "data")]


@dataclass
class Outcome:
    half: str
    family: str
    fault: str
    cadence: str
    run: str
    reference: str | None
    fired: dict[str, bool]
    applicable: bool
    """False when the fault cannot exist in this pair (a train-loss fault on eval-only logs)."""
    latency: float | None = None
    told: Told | None = None
    """What the incident tracker tells a person of this case (bench/quality/told.py)."""
    undecided: bool = False
    """The memorization detector said its evidence was undecided (a "not judged" line)."""


def pair_cases(half: str, cadences=faults.CADENCE_NAMES) -> Iterator[tuple[Fault, str, RunData, RunData, str]]:
    for run, ref, family in corpus.clean_pairs(half):
        for fault in pair_faults():
            for cadence in cadences:
                yield fault, cadence, run, ref, family


def judge_pair(fault: Fault, cadence: str, run: RunData, ref: RunData, family: str, half: str,
               latency: bool = False) -> Outcome:
    faulty = fault.inject(run) if fault.inject else run
    a, b = faults.apply_cadence(cadence, faulty, ref)
    applicable = fault.inject is None or "train/loss" in run.scalars or fault.name.startswith("worse")
    result = judge(a, b, DetectConfig(detectors=list(COMPARING), write_series=False))
    fired = {name: any(d.detector == name for d in result.detections) for name in COMPARING}
    undecided = any(n.detector == "memorization" and n.reason.startswith(UNDECIDED) for n in result.not_judged)
    out = Outcome(half, family, fault.name, cadence, run.name, ref.name, fired, applicable,
                  told=_told(result, a, fault, run), undecided=undecided)
    if latency and fault.expected and any(fired[n] for n in fault.expected):
        lag = _lag(cadence, a)
        out.latency = first_alert(a, b, fault.expected, lag) - faults.onset_step(run)
    return out


def judge_single(fault: Fault, run: RunData, half: str) -> Outcome:
    needs = {"stall 20x": "perf/step_time_s", "grad norm grows 3x": "train/grad_norm"}.get(fault.name, "train/loss")
    applicable = needs in run.scalars
    data = fault.inject(run) if (fault.inject and applicable) else run
    result = judge(data, None, DetectConfig(detectors=list(SINGLE), write_series=False))
    found = result.detections
    at = faults._point(run, needs) if applicable and fault.name != "grad norm grows 3x" else None
    fired = {}
    for name in SINGLE:
        hits = [d for d in found if d.detector == name]
        if at is not None and name in fault.expected:
            hits = [d for d in hits if d.start_step <= at <= d.end_step]
        if name == "grad_norm_growth" and fault.name == "grad norm grows 3x":
            hits = [d for d in hits if d.start_step >= faults.onset_step(run)]
        fired[name] = bool(hits)
    return Outcome(half, "single", fault.name, "-", run.name, None, fired, applicable,
                   told=_told(result, data, fault, run, single=True, at=at))


def _told(result, judged: RunData, fault: Fault, run: RunData, single: bool = False, at: int | None = None) -> Told:
    """What the tracker tells of the case; of a single run, only the incidents about the fault: those
    holding the step it was injected at (`at`), or its expected detector's findings (a drift)."""
    persists_from = faults.onset_step(run) if fault.inject is not None and fault.persists else None
    concerns = None
    if single:
        def concerns(alert) -> bool:
            if at is not None:
                return alert.start_step <= at <= alert.end_step
            return any(m.detector in fault.expected for m in alert.members.values())
    return replay(result.detections, result.cleans, judged.name, int(judged.scalars.index[-1]), fault.truth,
                  persists_from, grid=PIECE_STEPS, concerns=concerns)


def _lag(cadence: str, run: RunData) -> int:
    if cadence != "late evals":
        return 0
    held = [c for c in run.scalars.columns if c.startswith("eval/heldout/")]
    steps = run.scalars[held].dropna(how="all").index.to_numpy() if held else np.array([])
    return int(2 * np.median(np.diff(steps))) if steps.size > 1 else 0


def first_alert(run: RunData, reference: RunData, expected: tuple[str, ...], lag: int) -> float:
    """The step the run had reached when one of `expected` first reported a detection, feeding the
    run in pieces of PIECE_STEPS steps through the detection engine's incremental update (as the
    watch service does), with held-out rows arriving `lag` steps after their own step."""
    _, aligned = align_pair(run, reference)
    engine = DetectionEngine(DetectConfig(detectors=list(expected), write_series=False))
    states = engine.new_states()
    last = int(run.scalars.index[-1])
    held = [c for c in run.scalars.columns if c.startswith("eval/heldout/")]
    for hi in range(PIECE_STEPS, last + PIECE_STEPS, PIECE_STEPS):
        if engine.update(states, _arrived(run, hi - PIECE_STEPS, hi, held, lag), aligned).detections:
            return float(min(hi, last))
    return math.nan


def _arrived(run: RunData, lo: int, hi: int, held: list[str], lag: int) -> RunData:
    """Rows that reach the store while the run goes from step lo to hi: dense rows of those steps,
    held-out rows of the steps `lag` before."""
    piece = slice_rows(run, lo + 0.5, hi)
    if not lag or not held:
        return piece
    late = slice_rows(run, lo - lag + 0.5, hi - lag).scalars[held]
    scalars = piece.scalars.copy()
    scalars[held] = np.nan
    scalars = late.combine_first(scalars).sort_index()
    scalars = scalars[np.isfinite(scalars.to_numpy(dtype=float)).any(axis=1)]
    piece.scalars = scalars
    return piece
