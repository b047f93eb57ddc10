"""JSON for payloads that may hold NumPy scalars, arrays or enums (configs, event payloads)."""

from __future__ import annotations

import enum
import json
from typing import Any

import numpy as np


def dumps(value: Any) -> str:
    """Sorted keys, so equal payloads give equal text (the store deduplicates events by it)."""
    return json.dumps(value, sort_keys=True, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)
