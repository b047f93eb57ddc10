"""Detectors: pure, deterministic judges of runs (numpy, pandas, scipy, scikit-learn only).

`REGISTRY` maps each detector's name to its class; `build(names, **params)` makes instances, with
the settings checked against the detector's typed fields first (`check_params`: one line naming
the parameter and what is wrong, where a misspelt name would end in Python's "unexpected keyword
argument" and a text where a number belongs in a numpy traceback halfway through judging a run).
Each detector is one family in one module; `base` holds what they share.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
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
    check_params(params)
    # A list of metrics from a YAML or JSON file becomes the tuple the fields are declared as.
    return [REGISTRY[n](**{k: tuple(v) if isinstance(v, list) else v for k, v in params.get(n, {}).items()})
            for n in chosen]


def check_params(params: Any) -> None:
    """Raise ValueError, in one line naming the detector, the parameter and what is wrong, unless
    `params` ({detector name: {parameter: value}}) fits the detectors' fields. Names of detectors
    that do not exist are left to `build`, which lists the known ones."""
    if not isinstance(params, dict):
        raise ValueError(f"detector parameters must be a mapping of detector names, not {params!r}")
    for name, given in params.items():
        cls = REGISTRY.get(name)
        if cls is None:
            continue
        if not isinstance(given, dict):
            raise ValueError(f"the parameters of detector {name} must be a mapping, not {given!r}")
        fields = [f.name for f in dataclasses.fields(cls)]
        hints = typing.get_type_hints(cls)
        for key, value in given.items():
            if key not in fields:
                raise ValueError(f"unknown parameter {key!r} of detector {name}; its parameters: {', '.join(fields)}")
            wanted = _problem(value, hints[key], least=0 if key in cls.counts_from_zero else 1)
            if wanted is not None:
                raise ValueError(f"{key} of detector {name} must be {wanted}, not {value!r}")


def _problem(value: Any, kind: Any, least: int) -> str | None:
    """What `value` must be to fit the field type `kind` (None: it fits); a whole number, at least
    `least`."""
    if isinstance(kind, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        problems = [_problem(value, k, least) for k in options if k is not type(None)]
        if any(p is None for p in problems):
            return None
        return " or ".join(problems) + (" or null" if type(None) in options else "")
    if kind is bool:
        return None if isinstance(value, bool) else "true or false"
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return "a whole number"
        # Every whole-number parameter of a detector counts something (logged values, steps,
        # blocks, checkpoints, records), as its docstring says: at least one, unless the detector
        # says it may be none (Detector.counts_from_zero).
        return f"a count ({least} or more)" if value < least else None
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return "a finite number"
        # Every real-valued parameter of a detector is a size, a noise level, a ratio, a share or
        # a tolerance, as its docstring says: none of them means anything below zero.
        return "a number (0 or more)" if value < 0 else None
    if kind is str:
        return None if isinstance(value, str) else "a text"
    if typing.get_origin(kind) is tuple:
        # Tuples of names (metric keys); YAML and JSON give them as lists.
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return None if ok else "a list of names"
    return None  # a type this check does not know: the detector's own __post_init__ judges the value


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


__all__ = ["REGISTRY", "Detector", "DetectorState", "Reads", "ReferenceUse", "StoryRole", "build", "check_params", "drawn_by", "caveats", "comparing", "in_section", "judging", "make_run", "role_of",
           "shown_in", "verdict_roles",
           "state_from_dict", "state_to_dict"]
