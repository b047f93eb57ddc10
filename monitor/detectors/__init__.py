"""Detectors: pure, deterministic judges of runs (numpy, pandas, scipy, scikit-learn only).

`REGISTRY` maps each detector's name to its class; `build(names, **params)` makes instances.
Each detector is one family in one module; `base` holds what they share.
"""

from __future__ import annotations

from typing import Any

from monitor.schema import CleanRule, Detection, Drawing, Section, VerdictRole

from .base import Detector, Reads, ReferenceUse, StoryRole
from .data_invariants import DataInvariants
from .eval_regression import EvalRegression
from .grad_norm_growth import GradNormGrowth
from .heldout_divergence import HeldoutDivergence
from .incremental import DetectorState, state_from_dict, state_to_dict
from .memorization import Memorization
from .memorization_reread import MemorizationReread
from .memorization_trend import MemorizationTrend
from .nonfinite import NonFiniteDetector
from .reference_divergence import ReferenceDivergence
from .resume import ResumeConsistency
from .rundata import make_run
from .spike import SpikeDetector
from .throughput import ThroughputDetector

REGISTRY: dict[str, type[Detector]] = {
    cls.name: cls
    for cls in (
        ReferenceDivergence,
        Memorization,
        MemorizationTrend,
        MemorizationReread,
        HeldoutDivergence,
        SpikeDetector,
        NonFiniteDetector,
        GradNormGrowth,
        DataInvariants,
        ResumeConsistency,
        ThroughputDetector,
        EvalRegression,
    )
}


def build(names: list[str] | None = None, params: dict[str, dict[str, Any]] | None = None) -> list[Detector]:
    """Instances of the named detectors (all, in registry order, when `names` is None), each
    built with its entry of `params` ({detector name: {argument: value}})."""
    params = params or {}
    chosen = list(REGISTRY) if names is None else list(names)
    unknown = [n for n in chosen if n not in REGISTRY]
    if unknown:
        raise KeyError(f"unknown detector(s) {', '.join(unknown)}; known: {', '.join(REGISTRY)}")
    # Settings for a detector that does not exist would change nothing, silently (a misspelt name).
    unset = [n for n in params if n not in REGISTRY]
    if unset:
        raise KeyError(f"settings for unknown detector(s) {', '.join(unset)}; known: {', '.join(REGISTRY)}")
    # A list of metrics from a YAML or JSON file becomes the tuple the fields are declared as.
    return [REGISTRY[n](**{k: tuple(v) if isinstance(v, list) else v for k, v in params.get(n, {}).items()})
            for n in chosen]


_DEFAULTS: dict[str, Detector] = {}


def role_of(detection: Detection) -> StoryRole:
    """The story a detection tells and how it names it, as its detector declares; a detection of
    a detector this gapwatch does not know (an older store) is a story of its own."""
    cls = REGISTRY.get(detection.detector)
    if cls is None:
        return StoryRole(detection.detector, 0, detection.detector, CleanRule.JUDGED_STEPS)
    if detection.detector not in _DEFAULTS:
        _DEFAULTS[detection.detector] = cls()
    return _DEFAULTS[detection.detector].role(detection)


def judging(name: str) -> str:
    """What the detector `name` judges, in words ("train loss against the reference"); the name
    itself for a detector this gapwatch does not know (an older store)."""
    cls = REGISTRY.get(name)
    return (cls.judges or name) if cls is not None else name


def shown_in(section: Section) -> tuple[str, ...]:
    """Names of the detectors whose findings the report's and the dashboard's `section` shows."""
    return tuple(name for name, cls in REGISTRY.items() if section in cls.shown_in)


def drawn_by(drawing: Drawing, params: dict[str, dict[str, Any]] | None = None) -> Detector | None:
    """The detector that declares `drawing` (`Detector.draws`), built with its entry of `params`
    (as the run was judged), or None when no detector declares it."""
    for name, cls in REGISTRY.items():
        if drawing in cls.draws:
            return build([name], params)[0]
    return None


def in_section(detections: list[Detection], section: Section, metric: str | None = None) -> list[Detection]:
    """The detections that `section` shows (on `metric`, when given)."""
    detectors = shown_in(section)
    return [d for d in detections if d.detector in detectors and (metric is None or d.metric == metric)]


def verdict_roles() -> list[tuple[str, VerdictRole]]:
    """Each detector that can name the report's verdict, with its role, in order of precedence
    (registry order among equals)."""
    named = [(name, cls.verdict) for name, cls in REGISTRY.items() if cls.verdict is not None]
    return sorted(named, key=lambda pair: pair[1].precedence)


def comparing() -> tuple[str, ...]:
    """Names of the detectors that judge nothing without a reference: their "not judged" lines say
    why no comparison was made."""
    return tuple(name for name, cls in REGISTRY.items() if cls.reference_use is ReferenceUse.REQUIRED)


def caveats() -> tuple[str, ...]:
    """Names of the detectors whose findings qualify a "tied" verdict rather than overturn it."""
    return tuple(name for name, cls in REGISTRY.items() if cls.caveat)


__all__ = ["REGISTRY", "Detector", "DetectorState", "Reads", "ReferenceUse", "StoryRole", "build", "drawn_by", "caveats", "comparing", "in_section", "judging", "make_run", "role_of",
           "shown_in", "verdict_roles",
           "state_from_dict", "state_to_dict"]
