"""What an import format declares: its name, how it knows a source is its own, and its reader.

Each format module ends with one `Format` value; `FORMATS` in `monitor/importers/__init__.py` lists
them in the order detection asks them (the first that recognizes a source reads it), so a new
format is one module plus one line there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from monitor.errors import GapwatchError

from .input_checks import check_source

_SNIFF_BYTES = 64 * 1024


@dataclass(frozen=True)
class ReadOptions:
    """What a reader may use beyond the source; a format ignores what it has no use for (see
    `monitor.importers.load` for each)."""

    tokens_per_step: float | None = None
    step: int | None = None
    step_key: str | None = None
    progress: Callable[[int, int], None] | None = None
    api_config: Any = None
    source_run: str | None = None
    """Which run of a source that holds several (`Format.runs`)."""


@dataclass(frozen=True)
class Probe:
    """A local source as detection sees it: its path, whether it is a folder, and (a file) its
    first 64 KiB as text."""

    path: Path
    is_dir: bool
    head: str

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()

    @classmethod
    def of(cls, source: str | os.PathLike) -> Probe:
        path = Path(source)
        check_source(path)
        if path.is_dir():
            return cls(path, True, "")
        try:
            with open(path, "rb") as fh:
                head = fh.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
        except OSError as exc:
            raise GapwatchError(f"{path}: cannot read: {exc.strerror}") from None
        if not head.strip():
            raise GapwatchError(f"{source}: empty file: nothing to import")
        return cls(path, False, head)


@dataclass(frozen=True)
class Format:
    """One import format.

    read: (source, ReadOptions) -> ImportedRun with the source's own metric names.
    recognize: whether a local source (a `Probe`) is this format's; it may raise a GapwatchError
        for a source that is plainly its own but unreadable (a W&B runs table, say).
    url_scheme: a remote format's URL prefix (or prefixes); its sources are recognized by it, never probed.
    profile: the profile its names usually follow, preferred when detection ties.
    own_keys: its names are gapwatch's keys already: `profile` is taken, not detected.
    streamed: imported chunk by chunk (`table_import`), so memory is bounded by a chunk.
    tail: for `import --follow`, a reader of the source (source -> object whose `read()` returns
        an ImportedRun of the rows added since its last read), so that a growing source is not
        read again from its start at every poll; None: read whole each poll.
    runs: for a source that may hold several runs (a W&B panel export), the runs it holds; the
        reader reads the one `ReadOptions.source_run` names.
    steps: "own" (the reader puts rows on the trainer's step, taking `step_key` if it can),
        "rows" (its steps count rows: the trainer's step key is chosen from its names after
        reading), "asked" (its own steps, unless a step key is named).
    """

    name: str
    read: Callable[[Any, ReadOptions], Any]
    recognize: Callable[[Probe], bool] = lambda probe: False
    url_scheme: str | tuple[str, ...] | None = None
    profile: str | None = None
    own_keys: bool = False
    streamed: bool = False
    tail: Callable[[Any], Any] | None = None
    runs: Callable[[Any], list[str]] | None = None
    steps: Literal["own", "rows", "asked"] = "own"


__all__ = ["Format", "Probe", "ReadOptions"]
