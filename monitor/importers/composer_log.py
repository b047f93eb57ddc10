"""The console log of MosaicML Composer (llm-foundry's training runs print it): a block for each
logged batch, a line for each value, under the batch's position:

    [batch=12/24800]:                                  ([epoch=1][batch=12/24800]: with epochs;
         Train time/token: 49152                        a rank prefix `0: ` may come first)
         Train loss/train/total: 7.6250
         Train metrics/train/LanguageCrossEntropy: 7.6250
         Train lr-DecoupledAdamW/group0: 0.0006
         Eval metrics/eval/LanguageCrossEntropy: 7.5125

Source names are the keys after `Train ` or `Eval ` (`loss/train/total`), as Composer's W&B and
TensorBoard loggers name them, so the `composer` profile maps each the same wherever it was
logged. The step is the batch the header names. A value that is not a number (an image logged to
W&B prints as `<wandb...Image object at 0x...>`) is left out, with one note per name. A block
whose batch is lower than the last one logged is a restart (logged_rows.py): a job resumed from
its checkpoint in the same log. A last line without its newline is still being written: it is left
out, with a note.
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

_RANK = r"(?:\d+:\s*|\[\w+\]:\s*)?"
_HEADER = re.compile(rf"{_RANK}(?:\[epoch=\d+\])?\[batch=(\d+)/\d+\]:\s*$")
_VALUE = re.compile(rf"{_RANK}\s+(?:Train|Eval) (\S.*?): (.*?)\s*$")


def sniff(head: str) -> bool:
    """True if the first part of a file holds a batch header followed by a value line."""
    lines = head.splitlines()
    return any(_HEADER.match(a) and _VALUE.match(b) for a, b in zip(lines, lines[1:]))


def parse_composer_log(path: str | Path) -> ImportedRun:
    """One Composer console log, a line at a time."""
    rows = LoggedRows()
    left_out: dict[str, str] = {}
    step = None
    partial: list[str] = []
    for number, line in whole_lines(path, partial):
        header = _HEADER.match(line)
        if header:
            step = rows.at_step(number, step_digits(header.group(1), f"{path}: line {number}", "batch"))
            continue
        value = _VALUE.match(line) if step is not None else None
        if value is None:
            step = None if line.strip() else step  # a block ends at the first other line
            continue
        name, raw = value.groups()
        number_value = printed_number(raw)
        if number_value is None:
            left_out.setdefault(name, f"{path}: {name}: value {shown(raw)} (line {number}) is not a number: left out")
            continue
        rows.add(step, name, number_value)
    if not len(rows):
        raise GapwatchError(f"{path}: no Composer batch blocks with values found")
    return ImportedRun(name_hint=Path(path).stem, scalars=rows.take(with_wall_time=False), events=rows.events,
                       source=str(path), notes=[*left_out.values(), *partial])


FORMAT = Format("composer-log", lambda source, options: parse_composer_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="composer")
