"""Detectors: pure, deterministic judges of runs (numpy, pandas, scipy, scikit-learn only).

`REGISTRY` maps each detector's name to its class; `build(names, **params)` makes instances.
Each detector is one family in one module; `base` holds what they share.
"""

from __future__ import annotations

from typing import Any

from monitor.schema import CleanRule, Detection

from .base import Detector, ReferenceUse, StoryRole
from .data_invariants import DataInvariants
from .eval_regression import EvalRegression
from .grad_norm_growth import GradNormGrowth
from .heldout_divergence import HeldoutDivergence
from .memorization import Memorization
from .memorization_reread import MemorizationReread
from .memorization_trend import MemorizationTrend
from .nonfinite import NonFiniteDetector
from .reference_divergence import ReferenceDivergence
from .resume import ResumeConsistency
from .rundata import make_run
from .spike import SpikeDetector
from .state import DetectorState, state_from_dict, state_to_dict
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
    return [REGISTRY[n](**params.get(n, {})) for n in chosen]


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


__all__ = ["REGISTRY", "Detector", "DetectorState", "ReferenceUse", "StoryRole", "build", "make_run", "role_of",
           "state_from_dict", "state_to_dict"]
