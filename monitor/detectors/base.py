"""What every detector shares: its configuration, how it uses the reference, its severity rule
and its declarations (story, where it is shown, its role in the report's verdict).

A detector is a dataclass: every threshold is a field with a default and a docstring saying where
the value comes from, and `params()` and the watch service's state fingerprint are derived from the
fields. It judges a whole run with `detect(run, reference)` (plus `not_judged` and, for detectors
whose incidents end on clean verdicts, `clean`). How it judges a growing run piece by piece is
`monitor.detectors.incremental`: opt in, bounded by default.
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
    Drawing,
    NotJudged,
    RunData,
    Section,
    Severity,
    Story,
    VerdictRole,
    empty_long,
)

from .rundata import concat_rows, slice_ranges

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


@dataclass(frozen=True)
class Reads:
    """The metric columns a detector reads, declared rather than computed: the watch service keeps
    a tail of only these, and loads for a run only what some detector reads."""

    columns: tuple[str, ...] = ()
    """Columns read by name."""
    prefixes: tuple[str, ...] = ()
    """Every column under these prefixes (held-out sets, downstream tasks)."""
    fields: tuple[str, ...] = ()
    """The detector's own fields that name columns (a parameter such as `metric`, a column name or
    a tuple of them)."""


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
    """Base of all detectors: fields are the parameters; `detect` judges a run."""

    name: ClassVar[str] = ""
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.OPTIONAL
    story: ClassVar[Story | None] = None
    """The problem this detector tells of (None: a story of its own, named after it)."""
    specificity: ClassVar[int] = 1
    """Among the detectors of one story, the higher names the incident (memorization over "train
    below the reference")."""
    explanation: ClassVar[str] = ""
    """The incident's name when this detector's finding is the most specific one (default: its name)."""
    judges: ClassVar[str] = ""
    """What it judges, in words: how its "not judged" lines begin (default: its name)."""
    clean_rule: ClassVar[CleanRule] = CleanRule.JUDGED_STEPS
    """What ends its incidents: steps judged past the last flagged one, or its own clean verdicts."""
    shown_in: ClassVar[tuple[Section, ...]] = ()
    """Where its findings are listed and drawn: the report's tables and the dashboard's panels."""
    draws: ClassVar[tuple[Drawing, ...]] = ()
    """Pictures of its own statistics that the report and the dashboard draw (each `Drawing` says
    what the detector provides for it)."""
    verdict: ClassVar[VerdictRole | None] = None
    """How a finding of warning severity or more names the report's verdict (None: it never does)."""
    caveat: ClassVar[bool] = False
    """Its findings qualify a "tied" verdict rather than overturn it (spikes, stalls)."""
    reads: ClassVar[Reads | None] = None
    """The metric columns its verdicts read (None: every column)."""
    counts_from_zero: ClassVar[tuple[str, ...]] = ()
    """Its whole-number parameters that may be 0 (none to skip, none to wait): every other one
    counts values, steps, windows or blocks, at least 1 (checked as settings are read)."""

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

    def _clean(self, run: RunData, metric: str, start: int, end: int, evidence: dict[str, Any],
                alike_to: RunData | None = None) -> Clean:
        """A clean verdict; `alike_to`: the reference it shows the run alike to, if any."""
        return Clean(run=run.name, detector=self.name, metric=metric, start_step=int(start), end_step=int(end),
                     evidence=evidence, reference=None if alike_to is None else alike_to.name)

    def columns(self, run: RunData) -> list[str]:
        """The columns of `run` that this detector reads (`reads`), in the run's order."""
        if self.reads is None:
            return list(run.scalars.columns)
        named = set(self.reads.columns)
        for field in self.reads.fields:
            value = getattr(self, field)
            named.update((value,) if isinstance(value, str) else value)
        return [c for c in run.scalars.columns if c in named or c.startswith(self.reads.prefixes)]

    # --- helpers for subclasses ----------------------------------------------------------------
    def _detection(self, run: RunData, reference: RunData | None, metric: str, start: int,
                   end: int, peak: int, score: float, severity: Severity, message: str,
                   evidence: dict[str, Any], known: int | None = None) -> Detection:
        """A finding of steps start..end; `known`: the step it first held at, when a run of
        units (windows, checkpoints) makes it a finding only once it has persisted."""
        return Detection(
            run=run.name, detector=self.name, metric=metric, start_step=int(start),
            end_step=int(end), peak_step=int(peak), score=float(score), severity=severity,
            message=message, evidence=evidence,
            reference=reference.name if reference is not None else None,
            known_step=None if known is None else int(known),
        )
