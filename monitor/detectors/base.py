"""What every detector shares: its configuration, how it uses the reference, its severity rule,
and the incremental mode the watch service runs.

A detector is a dataclass: every threshold is a field with a default and a docstring saying where
the value comes from, and `params()` and the watch service's state fingerprint are derived from the
fields. It judges runs with `detect(run, reference)` over whole runs, or `update(state, new_rows,
reference)` as rows arrive. The default `update` keeps a tail of recent rows (as much history as
the detector's windows need, `lookback`), re-judges tail + new rows with `detect`, and reconciles
the result with what it has already reported: an interval that continues across updates keeps its
first step (the identity under which the store upserts it), and nothing already reported is
reported again unchanged.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd

from monitor.schema import (
    Clean,
    CleanRule,
    Detection,
    NotJudged,
    RunData,
    Section,
    Severity,
    Story,
    VerdictRole,
    empty_long,
)

from .rundata import (
    concat_rows,
    last_points_from,
    logging_interval,
    restrict_columns,
    slice_ranges,
    span,
    trim_columns,
    with_pinned,
)
from .state import DetectorState
from .stats import cadence

EVAL_PREFIX = "eval/"
# A detector reads the reference around the run rows it judges: the log-step slope of a curve is
# measured over +-5% of the step (noise.SLOPE_STRETCH), so 10% either side covers it.
REFERENCE_MARGIN = 0.1


def interval_key(column: str, points: int) -> str:
    """The pinned key of `column`'s logging interval over its first `points` steps."""
    return f"interval:{column}@{points}"


def reference_view(reference: RunData, lo: float, hi: float, cols: list[str]) -> RunData:
    """The reference rows a judgement of run rows lo..hi reads: dense columns around that range,
    eval columns whole (checkpoints are few, and interpolation needs the ones beyond the range)."""
    evals = [c for c in cols if c.startswith(EVAL_PREFIX) and c in reference.scalars.columns]
    dense = [c for c in cols if not c.startswith(EVAL_PREFIX)]
    near = slice_ranges(reference, [(lo * (1 - REFERENCE_MARGIN) - 1, hi * (1 + REFERENCE_MARGIN) + 1)], dense)
    if not evals:
        return near
    return concat_rows(slice_ranges(reference, [(-math.inf, math.inf)], evals), near)


class ReferenceUse(enum.Enum):
    """How a detector uses the reference run."""

    NONE = "none"
    """Never looks at it: the run is judged against itself."""
    OPTIONAL = "optional"
    """Compares with it when there is one, judges the run alone otherwise."""
    REQUIRED = "required"
    """Judges nothing without one."""


# A clean verdict is an equivalence test: the effect's 90% interval (two one-sided 5% tests) lies
# inside the band a detection would have had to clear.
CLEAN_Z = 1.6448536269514722


# The three memorization detectors (against the reference, within the run, re-reads) name one verdict.
MEMORIZATION_VERDICT = VerdictRole(30, "memorization_suspected", "Memorization suspected")


@dataclass(frozen=True)
class StoryRole:
    """How one detection joins the incidents: the story it tells, how specific an explanation of
    that story it is (the most specific one that holds names the incident), and in words."""

    story: str
    specificity: int
    explanation: str
    clean_rule: CleanRule
    yields_to: str | None = None
    """A story that takes this finding when it holds on the same run: train loss below the
    reference is memorization's only while held-out loss is tied; with held-out loss moved too it
    is a divergence (an improvement)."""


def severity_for(score: float, critical_ratio: float) -> Severity:
    """The severity of an effect `score` times its band: CRITICAL from `critical_ratio` on."""
    return Severity.CRITICAL if score >= critical_ratio else Severity.WARNING


@dataclass
class Detector(abc.ABC):
    """Base of all detectors: fields are the parameters; `detect`, and incremental `update`."""

    name: ClassVar[str] = ""
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.OPTIONAL
    keep_first_row: ClassVar[bool] = False  # incremental tail always keeps the run's first row
    story: ClassVar[Story | None] = None
    """The problem this detector tells of (None: a story of its own, named after it)."""
    specificity: ClassVar[int] = 1
    """Among the detectors of one story, the higher names the incident (memorization over "train
    below the reference")."""
    explanation: ClassVar[str] = ""
    """The incident's name when this detector's finding is the most specific one (default: its name)."""
    clean_rule: ClassVar[CleanRule] = CleanRule.JUDGED_STEPS
    """What ends its incidents: steps judged past the last flagged one, or its own clean verdicts."""
    shown_in: ClassVar[tuple[Section, ...]] = ()
    """Where its findings are listed and drawn: the report's tables and the dashboard's panels."""
    verdict: ClassVar[VerdictRole | None] = None
    """How a finding of warning severity or more names the report's verdict (None: it never does)."""
    caveat: ClassVar[bool] = False
    """Its findings qualify a "tied" verdict rather than overturn it (spikes, stalls)."""

    # --- configuration -----------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """The parameters this detector was built with (for reports and state)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def fingerprint(self) -> str:
        """A stable text of the parameters: saved watch state is reused only under the same one."""
        return json.dumps({"detector": self.name, **self.params()}, sort_keys=True, default=str)

    @property
    def needs_reference(self) -> bool:
        return self.reference_use is ReferenceUse.REQUIRED

    # --- batch ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def detect(self, run: RunData, reference: RunData | None = None) -> list[Detection]:
        """Every interval in which this detector sees `run` misbehave (sorted by start step)."""

    def detect_with_series(self, run: RunData, reference: RunData | None = None) -> tuple[list[Detection], pd.DataFrame]:
        """The detections and the series this detector emits (spike scores; none by default)."""
        return self.detect(run, reference), empty_long("step", "key", "value")

    @abc.abstractmethod
    def explain(self, run: RunData, reference: RunData | None = None) -> pd.DataFrame:
        """What this detector judged, as data: one row per unit (step, window, block or checkpoint)
        with the statistic, the band it had to clear and the verdict, for the dashboard, the report
        and the demo to draw or print instead of deriving the rule again."""

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        """What of `run` this detector could not judge, and why; empty when it judged everything
        it reads (its silence then means "clean")."""
        return []

    def role(self, detection: Detection) -> StoryRole:
        """The story `detection` tells and how it names it; a detector whose findings tell
        different stories by direction (train above or below the reference) overrides this."""
        return StoryRole((self.story.value if self.story else self.name), self.specificity,
                         self.explanation or self.name, self.clean_rule)

    def clean(self, run: RunData, reference: RunData | None = None) -> list[Clean]:
        """The units in which this detector judged its condition gone (CLEAN_VERDICTS detectors);
        an inconclusive unit is in neither this list nor the detections."""
        return []

    def _clean(self, run: RunData, metric: str, start: int, end: int, evidence: dict[str, Any]) -> Clean:
        return Clean(run=run.name, detector=self.name, metric=metric, start_step=int(start), end_step=int(end),
                     evidence=evidence)

    # --- what the incremental mode must keep ---------------------------------------------------
    def columns(self, run: RunData) -> list[str]:
        """The metric columns this detector reads (the incremental tail keeps only these)."""
        return list(run.scalars.columns)

    def history_points(self, column: str) -> int | None:
        """Logged values of `column` that a verdict on new rows depends on, counted back from the
        newest (None: all of them). Counted in points, not steps, so a metric logged every 10
        steps keeps as much of its own history as one logged every step."""
        return None

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
        the logging intervals (rundata.logging_interval) this detector's windows are cut by, once
        the run has logged enough to know them."""
        points = getattr(self, "cadence_points", None)
        if points is None:
            return pinned
        for column in self.columns(run):
            key = interval_key(column, points)
            if key not in pinned:
                value = logging_interval(run, column, points)
                if value is not None:
                    pinned[key] = value
        return pinned

    def carry(self, run: RunData, keep_from: dict[str, float], pinned: dict) -> dict:
        """What the rows about to be dropped (before `keep_from`) leave behind for later verdicts,
        merged into `pinned`; the default needs nothing beyond the logging intervals."""
        return pinned

    # --- incremental ---------------------------------------------------------------------------
    def new_state(self) -> DetectorState:
        return DetectorState(detector=self.name)

    def update(self, state: DetectorState, new_rows: RunData,
               reference: RunData | None = None) -> tuple[DetectorState, list[Detection]]:
        """Judge `new_rows` given what `state` remembers; returns the new state and the
        detections that are new or changed since the last call (same start step = same
        detection, to be upserted).

        Detectors judge only units (windows, blocks, checkpoints) that later rows cannot change, and
        their severities only grow with more evidence, so judging the tail again with `detect`
        reaches, for every unit, the verdict a pass over the whole run reaches (the property test in
        tests/monitor/watch/ checks it through the watch service)."""
        cols = self.columns(new_rows)
        fresh = restrict_columns(new_rows, cols)
        if fresh.scalars.empty and fresh.events.empty and fresh.repeats.empty:
            return state, []  # nothing this detector reads has arrived
        combined = fresh if state.tail is None else concat_rows(state.tail, fresh)
        if combined.scalars.empty and combined.events.empty:
            return state, []
        pinned = self.pin(with_pinned(combined, state.extra.get("pinned", {})), dict(state.extra.get("pinned", {})))
        view = with_pinned(combined, pinned)
        lo, hi = span(combined)
        ref = None
        if reference is not None and self.reference_use is not ReferenceUse.NONE:
            ref = reference_view(reference, lo, hi, cols)
        found = self.detect(view, ref)
        if state.last_step is not None:
            # Rows judged before were judged with all the history they needed; judged again at the
            # start of a shorter tail they may not be. A detection that ends before the new rows and
            # was not reported then is such an artifact, not news.
            settled = self.settled_before(view, span(fresh)[0])
            found = [d for d in found if d.end_step >= settled or _key(d) in state.reported
                     or _thread(d) in state.open]
        emitted = reconcile(state, found, self.merge_gap(cadence(combined.scalars.index.to_numpy())))
        if self.clean_rule is CleanRule.CLEAN_VERDICTS:
            state.cleans = self._new_cleans(state, view, ref, span(fresh)[0])
        keep = self.keep_from(view)
        state.extra["pinned"] = self.carry(view, keep, pinned)
        state.tail = trim_columns(combined, keep, self.keep_first_row)
        state.last_step = int(hi)
        prune(state)
        return state, emitted

    def _new_cleans(self, state: DetectorState, view: RunData, ref: RunData | None, first_new: float) -> list[Clean]:
        """Clean verdicts on units that the new rows completed: those a whole-run pass reaches too
        (units settled before were judged, with all their history, by an earlier update)."""
        settled = self.settled_before(view, first_new) if state.last_step is not None else -math.inf
        return [c for c in self.clean(view, ref) if c.end_step >= settled]

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


def prune(state: DetectorState) -> None:
    """Forget intervals that ended before the tail: no new row can change them any more."""
    if state.tail is None:
        return
    first = span(state.tail)[0]
    state.open = {m: d for m, d in state.open.items() if d.end_step >= first}
    state.reported = {k: fp for k, fp in state.reported.items() if fp[0] >= first}
