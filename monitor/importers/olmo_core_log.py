"""The console log of an OLMo-core training run (its ConsoleLoggerCallback), in either shape:

    ... [step=10/10000,epoch=0,eta=3h5m]             a block: the step, then a line a metric
        train/CE loss=10.23                          (4 spaces, `name=value`)
        train/PPL=27,712
        optim/LR (group 0)=3.00E-04
        throughput/total tokens=20,971,520
    ... [step=10/10000,epoch=0] epoch=0 loss=10.23 ppl=27,712 lr=3.00E-04 mem=21.4GiB tps=9,876 grad=1.234
                                                     one line (use_tqdm, its output not a terminal)

Source names are OLMo-core's own (`train/CE loss`), as its W&B callback logs them, so the `olmo`
profile maps them; the one-line shape's short names are turned into those (`loss` is
`train/CE loss`, `lr` `optim/LR (group 0)`, `grad` `optim/total grad norm`, `tps`
`throughput/device/TPS (actual avg)`). Values are read as OLMo-core formats them: thousands with
commas, small ones in E notation, a unit after the number (`GiB`, `%`) left off. A value that is
not a number is left out, with one note per name. A step lower than the last one logged is a
restart (logged_rows.py): a job resumed from its checkpoint in the same log. A last line without
its newline is still being written: it is left out, with a note.
"""

from __future__ import annotations

import re
from pathlib import Path

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import printed_number, step_digits
from .line_tail import LineParser, read_whole, tail_of

_MARKER = re.compile(r"\[step=(\d+)/(?:\d+|\?\?\?),epoch=\d+(?:,eta=[^\]]*)?\](.*)$")
_METRIC = re.compile(r"(?:\[\w+\]:)? {4}(\S[^=]*)=(\S+)\s*$")
_COMPACT = re.compile(r"(\w+)=(\S+)")
_SHORT_NAMES = {"loss": "train/CE loss", "ppl": "train/PPL", "lr": "optim/LR (group 0)",
                "grad": "optim/total grad norm", "mem": "gpu_memory/GPU active mem (GiB)",
                "bps": "throughput/device/BPS (actual avg)", "tps": "throughput/device/TPS (actual avg)",
                "mfu": "throughput/device/MFU (actual avg)"}
_UNITS = ("GiB", "%")


def sniff(head: str) -> bool:
    """True if the first part of a file holds a step marker followed by metrics."""
    lines = head.splitlines()
    return any((m := _MARKER.search(a)) and (_METRIC.match(b) or "loss=" in m.group(2))
               for a, b in zip(lines, lines[1:] + [""]))


def parse_olmo_core_log(path: str | Path) -> ImportedRun:
    """One OLMo-core console log, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no OLMo-core step markers with metrics found")


class _Parser(LineParser):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.step: int | None = None  # the step of the block being read

    def feed(self, number: int, line: str) -> None:
        marker = _MARKER.search(line)
        if marker:
            self.step = self.rows.at_step(number, step_digits(marker.group(1), f"{self.source}: line {number}"))
            for name, raw in _COMPACT.findall(marker.group(2)):
                if name != "epoch":
                    self._add(number, _SHORT_NAMES.get(name, name), raw)
            return
        metric = _METRIC.match(line) if self.step is not None else None
        if metric is None:
            self.step = None  # a block ends at the first other line
            return
        self._add(number, metric.group(1).strip(), metric.group(2))

    def _add(self, number: int, name: str, raw: str) -> None:
        value = _number(raw)
        if value is None:
            self.not_a_number(name, raw, number)
            return
        self.rows.add(self.step, name, value)


def _number(raw: str) -> float | None:
    """A value as OLMo-core prints it: thousands with commas, a unit after the number."""
    text = raw.replace(",", "")
    for unit in _UNITS:
        text = text.removesuffix(unit)
    return printed_number(text)


FORMAT = Format("olmo-core-log", lambda source, options: parse_olmo_core_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="olmo",
                tail=tail_of(_Parser))
