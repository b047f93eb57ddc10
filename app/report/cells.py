"""Table cells as text, the same in every format; escaping is each renderer's job."""

from __future__ import annotations

import math
from typing import Any

from app.report.model import Column, Estimate

MISSING = "—"
MINUS = "\u2212"  # a typographic minus: "−0.004", as reproductions write it


def number(value: float, fmt: str, signed: bool = False) -> str:
    if not math.isfinite(value):
        return str(value)
    if signed and "+" not in fmt:
        fmt = "+" + fmt
    return format(value, fmt).replace("-", MINUS)


def estimate(e: Estimate, fmt: str, signed: bool) -> str:
    if not math.isfinite(e.value):
        return MISSING
    text = number(e.value, fmt, signed)
    if e.stderr is not None and math.isfinite(e.stderr):
        text += f" ± {'≈' if e.estimated else ''}{number(e.stderr, fmt)}"
    return text


def cell(value: Any, column: Column) -> str:
    """One value of a row as text, by its column's format."""
    if value is None:
        return MISSING
    if isinstance(value, Estimate):
        return estimate(value, column.fmt or ".4g", column.signed)
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, int):
        return format(value, ",") if "," in column.fmt else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return MISSING if math.isnan(value) else str(value)
        if not column.fmt:
            return str(value)
        return number(value, column.fmt, column.signed)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)
