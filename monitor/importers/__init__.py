"""Reference runs from anywhere: `load(source)` reads a file, folder or URL into an ImportedRun.

The format is detected from the source (see `detect_format`); metric names are mapped onto
gapwatch's keys by a profile (`monitor.importers.profiles`), detected unless one is named.
Parsers never touch a store; `monitor.importers.store_writer` writes an ImportedRun atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

from monitor.errors import GapwatchError

from .imported_run import ImportedRun, empty_scalars, scalars_frame
from .normalize import apply_profile
from .profiles import Profile, resolve_profile

FORMATS = ("llmc-log", "wandb-csv")
_SNIFF_BYTES = 64 * 1024


def detect_format(source: str | os.PathLike) -> str:
    """The importer for a source, from its URL scheme, name, and first bytes."""
    path = Path(source)
    if not path.exists():
        raise GapwatchError(f"{source}: no such file or directory")
    if path.is_dir():
        raise GapwatchError(f"{source}: no importer reads this folder")
    suffix = path.suffix.lower()
    head = _head(path)
    if suffix in (".csv", ".tsv"):
        return "wandb-csv"
    from . import text_logs

    if text_logs.sniff(head):
        return "llmc-log"
    raise GapwatchError(f"{source}: unrecognised format (no importer reads this file)")


def load(source: str | os.PathLike, profile: str | Profile | None = None, *,
         fmt: str | None = None, tokens_per_step: float | None = None,
         profiles_file: str | os.PathLike | None = None) -> ImportedRun:
    """Read one source into an ImportedRun with gapwatch metric keys.

    profile: a profile name or object; None detects it from the source's metric names.
    fmt: force an importer (one of FORMATS) instead of detecting it.
    tokens_per_step: tokens in one optimizer step, when the source does not say.
    profiles_file: the user's profile YAML (default: $GAPWATCH_PROFILES or the config dir).
    """
    fmt = fmt or detect_format(source)
    raw, prefer = _parse(fmt, source, tokens_per_step)
    if tokens_per_step is not None:
        raw.tokens_per_step = float(tokens_per_step)
    names = raw.scalars["key"].unique().tolist()
    chosen = resolve_profile(profile, names, prefer=prefer, user_file=profiles_file)
    return apply_profile(raw, chosen)


def _parse(fmt: str, source, tokens_per_step) -> tuple[ImportedRun, str | None]:
    """The raw ImportedRun (source metric names) and the profile the format usually uses."""
    if fmt == "llmc-log":
        from .text_logs import parse_text_log

        return parse_text_log(source), "llmc"
    if fmt == "wandb-csv":
        from .wandb_csv import parse_wandb_csv

        return parse_wandb_csv(source, tokens_per_step=tokens_per_step), None
    raise GapwatchError(f"unknown import format {fmt!r}; known: {', '.join(FORMATS)}")


def _head(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise GapwatchError(f"{path}: cannot read: {exc.strerror}") from None


__all__ = [
    "ImportedRun",
    "Profile",
    "load",
    "detect_format",
    "empty_scalars",
    "scalars_frame",
    "FORMATS",
]
