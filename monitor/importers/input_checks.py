"""Checks at the door of every importer, for what a parser cannot take safely or would change.

* `check_source`: only regular files and folders are read; a named pipe or a device would block
  the import forever (or never end).
* `loads`: `json.loads` that refuses a number no 64-bit float holds (`1e309`, 400 digits) instead
  of turning it into infinity or raising OverflowError later; `Infinity` and `NaN` written as such
  stay logged values.
  An object that gives a name twice is refused too (json.loads would keep one value silently).
* `unfit_literal`: the same rule for a CSV cell.
* `repeated_name`: a CSV header's repeated column, which pandas would rename into a phantom
  metric (`train/loss.1`).
* `shown`, `cut`: a value as a message shows it, cut short (a 5 MB metric name is not echoed
  whole).
* `unreachable`: why a server (W&B, MLflow) could not be reached, in words.
"""

from __future__ import annotations

import csv
import json
import math
import os
import socket
import stat

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

# Characters of a value a one-line message shows before cutting it short.
SHOWN_CHARS = 80
# Digits beyond which an integer is no step a store keeps, and may not fit a float either.
_STEP_DIGITS = 19
_INF_WORDS = ("inf", "infinity")


def shown(value) -> str:
    """repr(value), cut short as `cut` does."""
    return cut(repr(value))


def cut(text: str) -> str:
    """text, cut to SHOWN_CHARS characters with the full length said."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


def check_source(path: str | os.PathLike) -> None:
    """Refuse a source that is neither a regular file nor a folder (after symlinks)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise GapwatchError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise GapwatchError(f"{path}: cannot read: {exc.strerror}") from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = ("a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
    raise GapwatchError(f"{path}: {kind}, not a regular file or folder: only files are imported")


class UnfitNumber(ValueError):
    """A number written in the source that no 64-bit float holds."""

    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal

    def describe(self) -> str:
        return f"the number {shown(self.literal)} does not fit a 64-bit float"


def _float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise UnfitNumber(literal)
    return value


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > _STEP_DIGITS:
        try:
            float(int(literal))
        except (OverflowError, ValueError):  # ValueError: beyond Python's int-from-text limit
            raise UnfitNumber(literal) from None
    return int(literal)


class RepeatedName(json.JSONDecodeError):
    """An object that gives one name twice: json.loads would keep the last value and drop the
    first without a word. A JSONDecodeError, so every reader that refuses bad JSON refuses it."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the name {shown(name)} appears twice in one object", "", 0)


def _unique_names(pairs: list[tuple[str, object]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise RepeatedName(name)
            seen.add(name)
    return obj


def loads(text: str | bytes):
    """json.loads, raising UnfitNumber for a number no float holds, RepeatedName for an object
    that gives a name twice (and, as json.loads does, JSONDecodeError for bad JSON and
    RecursionError for nesting deeper than Python recurses)."""
    return json.loads(text, parse_float=_float, parse_int=_int, object_pairs_hook=_unique_names)


def unfit_literal(cell: str) -> bool:
    """A CSV cell that reads as a number but overflows a float (not `inf` written as such)."""
    text = cell.strip().lower().lstrip("+-")
    if text in _INF_WORDS:
        return False
    try:
        return math.isinf(float(text))
    except ValueError:
        return False


def repeated_name(header: list[str]) -> str | None:
    """The first column name a CSV header gives twice (pandas would rename it `name.1`)."""
    seen = set()
    for name in header:
        if name.strip() in seen:
            return name.strip()
        seen.add(name.strip())
    return None


def csv_header(path: str | os.PathLike, delimiter: str) -> list[str]:
    """The first row of a CSV file as written; [] when it cannot be read (the parser says why)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return next(csv.reader(fh, delimiter=delimiter), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def unnamed_columns(path, header: list[str]) -> tuple[list[int], str | None]:
    """The positions of a CSV header's columns without a name, and a note leaving them out: such
    a column is no series (pandas' `to_csv` writes its index so, W&B's `run.history()` saved
    without `index=False` among them)."""
    unnamed = [i for i, h in enumerate(header) if not h.strip()]
    if not unnamed:
        return [], None
    at = ", ".join(str(i + 1) for i in unnamed)
    return unnamed, (f"{path}: column {at} has no name (as the index pandas' to_csv writes): "
                     "left out")


def setting(text: str):
    """A setting written as text (a Megatron-LM argument, an MLflow param): an int, a finite float,
    True, False or None where it reads as one, else the text."""
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if not isinstance(value, float) or math.isfinite(value) else text
    return {"True": True, "False": False, "None": None}.get(text, text)


def step_digits(digits: str, where: str, word: str = "step") -> int:
    """A step a text log writes as digits; one beyond the largest a store keeps is an error that
    says `where` it was read."""
    if len(digits) > len(str(MAX_STEP)) or int(digits) > MAX_STEP:
        raise GapwatchError(f"{where}: {word} {cut(digits)} is beyond the largest step a store keeps ({MAX_STEP})")
    return int(digits)


def whole_lines(path: str | os.PathLike, notes: list[str]):
    """(number, text) of each line of a text log a trainer may still be appending to, its line end
    left off. A last line without its newline is still being written: it is left out and `notes`
    says so, so that a log read while it grows (`import --follow`) never takes half a value."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.endswith("\n"):
                    if line.strip():
                        notes.append(f"{path}: line {number} has no newline yet (still being written): left out")
                    return
                yield number, line.rstrip("\r\n")
    except OSError as exc:
        raise GapwatchError(f"{path}: cannot read: {exc.strerror}") from None


def printed_number(text) -> float | None:
    """A value as a log prints it: a number, or NaN or Inf written as such; None for anything else
    (text, a bool, a number too large for a float, which would read as an infinity)."""
    if isinstance(text, bool):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    written = str(text).strip().lower().lstrip("+-")
    return value if math.isfinite(value) or written in ("nan", "inf", "infinity") else None


def yaml_mapping(file, notes: list[str]) -> dict:
    """A settings file's YAML mapping (DVCLive's params.yaml, W&B's config.yaml): {} where there is
    none, or where it is no mapping; a note where it cannot be parsed."""
    import yaml

    if not file.is_file():
        return {}
    try:
        doc = yaml.safe_load(file.read_text(errors="replace"))
    except yaml.YAMLError as exc:
        notes.append(f"{file}: not read: {' '.join(str(exc).split())}")
        return {}
    return doc if isinstance(doc, dict) else {}


def unreachable(reason: object, timeout_s: float) -> str:
    """Why a server could not be reached, in words: `reason` is a URLError's reason, or the
    error raised outside one (a timeout while reading the answer)."""
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    if isinstance(reason, socket.gaierror):
        return f"host name not resolved ({reason.strerror})"
    return str(reason)
