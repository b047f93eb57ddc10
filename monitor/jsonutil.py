"""JSON for payloads that may hold NumPy scalars, arrays or enums (configs, event payloads).

The one place that decides what a number that is not finite becomes in JSON:
* `dumps`, the store's text: NaN and Inf kept, so a payload reads back as it was written;
* `plain`, what the CLI's `--json`, the report's JSON and the dashboard's live updates hand out:
  strict JSON, where it is null;
* `readable`, records that are compared and shown again (a detection's score and evidence, an
  alert's notification to Slack, a webhook or the console): strict JSON, where it is its text
  ("nan", "inf", "-inf"), since null would lose which it was and NaN never equals itself.
"""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import numpy as np


def dumps(value: Any) -> str:
    """Sorted keys, so equal payloads give equal text (the store deduplicates events by it)."""
    return json.dumps(value, sort_keys=True, default=_default)


def plain(value: Any) -> Any:
    """`value` as strict JSON data: NumPy scalars and arrays as Python numbers and lists, enums as
    their values, a float that is not finite as None, containers recursively, anything else as text."""
    return _strict(value, lambda _: None)


def readable(value: Any) -> Any:
    """As `plain`, but a float that is not finite is its text ("nan", "inf", "-inf")."""
    return _strict(value, str)


def _strict(value: Any, nonfinite) -> Any:
    if isinstance(value, (np.generic, np.ndarray)):
        value = value.tolist()
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float):
        return value if math.isfinite(value) else nonfinite(value)
    if isinstance(value, dict):
        return {str(k): _strict(v, nonfinite) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v, nonfinite) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return str(value)


def _default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)
