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

from monitor.errors import GapwatchError

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import printed_number, shown, step_digits, whole_lines
from .logged_rows import LoggedRows

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
    rows = LoggedRows()
    left_out: dict[str, str] = {}
    step = None
    partial: list[str] = []
    for number, line in whole_lines(path, partial):
        marker = _MARKER.search(line)
        if marker:
            step = rows.at_step(number, step_digits(marker.group(1), f"{path}: line {number}"))
            for name, raw in _COMPACT.findall(marker.group(2)):
                if name != "epoch":
                    _add(rows, left_out, path, number, step, _SHORT_NAMES.get(name, name), raw)
            continue
        metric = _METRIC.match(line) if step is not None else None
        if metric is None:
            step = None  # a block ends at the first other line
            continue
        _add(rows, left_out, path, number, step, metric.group(1).strip(), metric.group(2))
    if not len(rows):
        raise GapwatchError(f"{path}: no OLMo-core step markers with metrics found")
    return ImportedRun(name_hint=Path(path).stem, scalars=rows.take(with_wall_time=False), events=rows.events,
                       source=str(path), notes=[*left_out.values(), *partial])


def _add(rows: LoggedRows, left_out: dict, path, number: int, step: int, name: str, raw: str) -> None:
    value = _number(raw)
    if value is None:
        left_out.setdefault(name, f"{path}: {name}: value {shown(raw)} (line {number}) is not a number: left out")
        return
    rows.add(step, name, value)


def _number(raw: str) -> float | None:
    """A value as OLMo-core prints it: thousands with commas, a unit after the number."""
    text = raw.replace(",", "")
    for unit in _UNITS:
        text = text.removesuffix(unit)
    return printed_number(text)


FORMAT = Format("olmo-core-log", lambda source, options: parse_olmo_core_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="olmo")
