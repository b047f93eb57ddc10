"""The console log of torchtitan (PyTorch's pre-training trainer): a line for each logged step, its
fields `name: value` two spaces apart, coloured with ANSI escapes unless color printing is off:

    [rank0]:[titan] 2025-03-04 10:00:01,123 - root - INFO - step: 10  loss:  7.9342  grad_norm:  1.2345
        memory: 40.12GiB(42.30%)  tps: 1,234  tflops: 123.45  mfu: 12.34%            (one line)
    [rank0]:[titan] ... - INFO - validate step: 500  loss:  6.1234  memory: 40.12GiB(42.30%)  tps: 9,876

Source names are those its TensorBoard and W&B loggers give the same values, so the `torchtitan`
profile maps them wherever they were logged: `loss` is `loss_metrics/global_avg_loss` (the mean
over data-parallel ranks), `tps` is `throughput(tps)`, `mfu: 12.34%` is `mfu(%)`, `memory:
40.12GiB(42.30%)` is `memory/max_reserved(GiB)` and `memory/max_reserved(%)`; a validation line's
values are under `validation_metrics/`. A field the trainer added (`elapsed_time_per_step: 1.234s`)
keeps its name, its unit in brackets as torchtitan writes units (`elapsed_time_per_step(s)`).
Numbers may carry thousands separators (`1,234`). A value that is not a number (`mfu: N/A`) is
left out, with one note per name.

torchrun prefixes each line with its rank (`[rank0]:`) when it tees the ranks' output into one
file; every rank prints the same values, so only the first rank seen is read and a note says how
many other lines were left out. A job that appends to the same log starts with `Training starts at
step N`: after logged steps, that is a restart at N (a new attempt, logged_rows.py), even where
it goes back on no step; so is a step lower than a series last had. A last line without its
newline is still being written: it is left out, with a note.
"""

from __future__ import annotations

import re
from pathlib import Path

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import printed_number, step_digits
from .line_tail import LineParser, read_whole, tail_of

_COLOR = re.compile(r"\x1b\[[0-9;]*m")
_RANK = re.compile(r"^\[rank(\d+)\]:")
_STEP = re.compile(r"(?:^|\s)(validate )?step:\s*(\d+)(?=\s)(.*)$")
_FIELD = re.compile(r"([A-Za-z_]\w*):\s*(\S+)")
_STARTS = re.compile(r"Training starts at step (\d+)")
_UNIT = re.compile(r"^(.*?\d)(%|s|GiB)$")
_MEMORY = re.compile(r"^(.+)GiB\((.+)%\)$")
# The console's short names of values its metric loggers name otherwise.
_LOGGED_AS = {"loss": "loss_metrics/global_avg_loss", "tps": "throughput(tps)"}
_VALIDATION = "validation_metrics/"


def sniff(head: str) -> bool:
    """True if the first part of a file holds a torchtitan step line."""
    return any(_step_fields(_rank_and_text(line)[1]) is not None for line in head.splitlines())


def parse_torchtitan_log(path: str | Path) -> ImportedRun:
    """One torchtitan console log, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no torchtitan step lines with values found")


class _Parser(LineParser):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.rank: int | None = None  # the rank whose lines are read
        self.other_ranks = 0  # lines of other ranks left out

    def feed(self, number: int, line: str) -> None:
        rank, text = _rank_and_text(line)
        if rank is not None and not self._reads(rank):
            return
        found = _step_fields(text)
        if found is None:
            self._started(number, text)
            return
        validation, digits, fields = found
        step = self.rows.at_step(number, step_digits(digits, f"{self.source}: line {number}"))
        prefix = _VALIDATION if validation else ""
        for name, raw in _FIELD.findall(fields):
            values = _values(name, raw, validation)
            if values is None:
                self.not_a_number(name, raw, number)
                continue
            for key, value in values:
                self.rows.add(step, prefix + key, value)

    def _reads(self, rank: int) -> bool:
        """True for the lines of the first rank seen; the others' lines are counted and left out."""
        self.rank = rank if self.rank is None else self.rank
        if rank != self.rank:
            self.other_ranks += 1
        return rank == self.rank

    def _started(self, number: int, text: str) -> None:
        """`Training starts at step N`: a process starts (or resumes) training there."""
        start = _STARTS.search(text)
        if start is not None:
            step = step_digits(start.group(1), f"{self.source}: line {number}")
            self.rows.started_again(number, step, f"the job started again: {start.group(0)!r}")

    def notes(self) -> list[str]:
        if not self.other_ranks:
            return super().notes()
        return [*super().notes(), f"{self.source}: {self.other_ranks:,} lines of ranks other than rank {self.rank} "
                                  "left out (every rank prints the same values)"]


def _rank_and_text(line: str) -> tuple[int | None, str]:
    """The rank torchrun prefixed a line with (None without one), and the line without colours."""
    text = _COLOR.sub("", line)
    rank = _RANK.match(text)
    return (int(rank.group(1)) if rank else None), text


def _step_fields(text: str) -> tuple[bool, str, str] | None:
    """(a validation line, the step's digits, the fields after it) of a step line, else None."""
    found = _STEP.search(text)
    if found is None or not _FIELD.search(found.group(3)):
        return None
    return bool(found.group(1)), found.group(2), found.group(3)


def _values(name: str, raw: str, validation: bool) -> list[tuple[str, float]] | None:
    """The values one field prints, under their metric loggers' names (a validation line's `loss`
    is `validation_metrics/loss`); None if it is no number."""
    memory = _MEMORY.match(raw) if name == "memory" else None
    if memory is not None:
        gib, share = (printed_number(v) for v in memory.groups())
        if gib is None or share is None:
            return None
        return [("memory/max_reserved(GiB)", gib), ("memory/max_reserved(%)", share)]
    unit = _UNIT.match(raw)
    number, suffix = (unit.group(1), f"({unit.group(2)})") if unit else (raw, "")
    value = printed_number(number.replace(",", ""))
    if value is None:
        return None
    logged_as = name + suffix if validation and name == "loss" else _LOGGED_AS.get(name, name + suffix)
    return [(logged_as, value)]


FORMAT = Format("torchtitan-log", lambda source, options: parse_torchtitan_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="torchtitan",
                tail=tail_of(_Parser))
