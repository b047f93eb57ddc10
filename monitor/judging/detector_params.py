"""Detector settings checked against the detectors' own fields before any detector is built.

A detector is a dataclass whose typed fields are its parameters (monitor/detectors/base.py), so a
setting from a watch config or a script is checked against that field: its name must be one of
the detector's, its value of the field's type. Without this a misspelt name ends in Python's
"__init__() got an unexpected keyword argument" and a text where a number belongs in a numpy
traceback halfway through judging a run.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from monitor.detectors import REGISTRY


def check_params(params: Any) -> None:
    """Raise ValueError, in one line naming the detector, the parameter and what is wrong, unless
    `params` ({detector name: {parameter: value}}) fits the detectors' fields. Names of detectors
    that do not exist are left to `monitor.detectors.build`, which lists the known ones."""
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
        return None
    if kind is str:
        return None if isinstance(value, str) else "a text"
    if typing.get_origin(kind) is tuple:
        # Tuples of names (metric keys); YAML and JSON give them as lists.
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return None if ok else "a list of names"
    return None  # a type this check does not know: the detector's own __post_init__ judges the value
