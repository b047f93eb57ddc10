"""A generic CSV log's text cells as steps and numbers, by the cell rules of `generic_rows`.

A column of a block is cast in one step (pyarrow's parser of decimal text rounds as `float()`
does) when its cells are plain numbers; a cell the cast does not take (`true`, `1_000`, text) or
one it reads as an infinity sends the column through `cell_numbers`, the exact reading of each
cell, which also says which cells no double holds.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .input_checks import UnfitNumber, unfit_literal


def numbers(column: pa.Array, strict: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, logged) of a text column: an empty cell is not logged. strict: None when a cell
    is not a number; else such a cell is not logged. UnfitNumber for a number no double holds."""
    got = plain_numbers(column)
    if got is not None:
        return got
    logged = pc.invert(pc.equal(pc.utf8_trim_whitespace(column), "")).to_numpy(zero_copy_only=False)
    return cell_numbers(column.to_pylist(), logged, strict)


def plain_numbers(column: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """`numbers` of a column whose cells are all plain numbers or empty, in one cast; None when a
    cell is anything else (arrow cannot read it, or reads it as an infinity)."""
    trimmed = pc.utf8_trim_whitespace(column)
    empty = pc.equal(trimmed, "")
    try:
        cast = pc.cast(pc.if_else(empty, pa.scalar(None, pa.string()), trimmed), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    values = pc.fill_null(cast, math.nan).to_numpy(zero_copy_only=False)
    if np.isinf(values).any():
        return None
    return values, pc.invert(empty).to_numpy(zero_copy_only=False)


def cell_numbers(text: list, logged: np.ndarray, strict: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """`numbers`, a cell at a time (`logged` marks the cells that are not empty; it loses the text
    cells of a column that is not strict)."""
    values = np.full(len(text), math.nan)
    for i in np.flatnonzero(logged).tolist():
        word = text[i].strip().lower()
        if word in ("true", "false"):
            values[i] = 1.0 if word == "true" else 0.0
            continue
        try:
            values[i] = float(text[i])
        except ValueError:
            if strict:
                return None
            logged[i] = False
            continue
        if math.isinf(values[i]) and unfit_literal(text[i]):
            raise UnfitNumber(text[i])
    return values, logged


def whole_steps(column: pa.Array) -> np.ndarray | None:
    """Steps as 64-bit integers when every cell is one as `int()` reads it; None otherwise."""
    try:
        return pc.cast(pc.utf8_trim_whitespace(column), pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # arrow takes no "+5" or "5_000"; Python's int() is the rule the slow path keeps
    try:
        return np.array([int(s) for s in column.to_pylist()], dtype=np.int64)
    except (ValueError, OverflowError):
        return None


def leading_spaces_cut(column: pa.Array) -> list:
    """The cells as text with the spaces after each delimiter skipped, as the CSV reading that
    the line-by-line rules were written for hands them over."""
    return pc.utf8_ltrim(column, characters=" ").to_pylist()
