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

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import printed_number, step_digits
from .line_tail import LineParser, read_whole, tail_of

_RANK = r"(?:\d+:\s*|\[\w+\]:\s*)?"
_HEADER = re.compile(rf"{_RANK}(?:\[epoch=\d+\])?\[batch=(\d+)/\d+\]:\s*$")
_VALUE = re.compile(rf"{_RANK}\s+(?:Train|Eval) (\S.*?): (.*?)\s*$")


def sniff(head: str) -> bool:
    """True if the first part of a file holds a batch header followed by a value line."""
    lines = head.splitlines()
    return any(_HEADER.match(a) and _VALUE.match(b) for a, b in zip(lines, lines[1:]))


def parse_composer_log(path: str | Path) -> ImportedRun:
    """One Composer console log, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no Composer batch blocks with values found")


class _Parser(LineParser):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.step: int | None = None  # the batch of the block being read

    def feed(self, number: int, line: str) -> None:
        header = _HEADER.match(line)
        if header:
            self.step = self.rows.at_step(number, step_digits(header.group(1), f"{self.source}: line {number}", "batch"))
            return
        value = _VALUE.match(line) if self.step is not None else None
        if value is None:
            self.step = None if line.strip() else self.step  # a block ends at the first other line
            return
        name, raw = value.groups()
        number_value = printed_number(raw)
        if number_value is None:
            self.not_a_number(name, raw, number)
            return
        self.rows.add(self.step, name, number_value)


FORMAT = Format("composer-log", lambda source, options: parse_composer_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="composer",
                tail=tail_of(_Parser))
