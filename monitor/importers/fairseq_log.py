"""The stdout training logs of fairseq and metaseq (OPT's logbooks), in either of their formats.

fairseq logs each interval of updates, each validation and each epoch's summary on one line,
under the logger renamed for it (`train_inner`, `valid` or `test` or another evaluated subset's name,
`train`):

    2021-10-28 16:06:24 | INFO | train_inner | {"epoch": 1, "update": 0.02, "loss": "13.108",
        "ppl": "8829.92", "wps": "51023", ..., "num_updates": "100", "lr": "3e-05", ...}
                                                                  --log-format json (metaseq's)
    2021-10-28 16:06:24 | INFO | valid | {"epoch": 1, "valid_loss": "7.063", ...,
        "valid_num_updates": "1000", "valid_best_loss": "7.063"}
    ... | INFO | train_inner | epoch 001:    100 / 5000 loss=13.108, ppl=8829.92, ...,
        num_updates=100, lr=3e-05, ...                                    --log-format simple
    ... | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.063 | ppl 133.7 | ... |
        num_updates 1000 | best_loss 7.063

Source names are `<logger>/<stat>` (`train_inner/loss`, `valid/loss`, `train/loss`), as fairseq
names them in its TensorBoard folders and W&B sections, so the `fairseq` profile maps both (its
losses are in bits). The step is `num_updates`; `epoch` and `update` (the epoch's fraction) say
where in the data it is, not a metric, and are left out. A line's values are numbers or numbers
written as text; any other (`"gb_free": "N/A"`) is left out with one note per name. Lines of other
loggers are ignored, except the configuration fairseq prints as a Python dict
(`fairseq_cli.train | {'_name': None, 'common': {...}}`), which becomes the run's config. A stat
that goes back to a lower step than it last had is a restart (logged_rows.py): metaseq's runs
were rolled back and resumed in the same log many times. A last line without its newline is still
being written: it is left out, with a note.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from monitor.errors import GapwatchError

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import printed_number, shown, step_digits
from .line_tail import LineParser, read_whole, tail_of

# The logger a line is under, between ` | `: fairseq renames it to the tag of the stats it logs.
_LINE = re.compile(r"\|\s*(?:INFO|WARNING)\s*\|\s*(train_inner|train|valid\w*|test\w*)\s*\|\s*(.*?)\s*$")
_SIMPLE_INNER = re.compile(r"epoch \d+:\s+\d+\s*/\s*\d+\s+(.*)$")
_CONFIG = re.compile(r"\|\s*INFO\s*\|\s*(?:fairseq_cli|metaseq_cli|metaseq\.cli)\.train\s*\|\s*(\{.*\})\s*$")
STEP = "num_updates"
_WHOLE = re.compile(r"\d+(?:\.0*)?")  # a count of updates, as text ("100") or a number (100, 100.0)
_POSITION = {"epoch", "update"}  # where in the data, not metrics


def sniff(head: str) -> bool:
    """True if the first part of a file holds a fairseq stats line."""
    return any((m := _LINE.search(line)) and (m.group(2).startswith("{") or m.group(2).startswith("epoch "))
               for line in head.splitlines())


def parse_fairseq_log(path: str | Path) -> ImportedRun:
    """One fairseq or metaseq stdout log, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no fairseq stats lines with num_updates found")


class _Parser(LineParser):
    def feed(self, number: int, line: str) -> None:
        m = _LINE.search(line)
        if m is None:
            if not self.config and (c := _CONFIG.search(line)):
                self.config = _config(c.group(1))
            return
        tag, body = m.groups()
        stats = _json_stats(body, tag) if body.startswith("{") else _simple_stats(body)
        if stats is None or STEP not in stats:
            return
        raw_step = str(stats.pop(STEP)).strip()
        if not _WHOLE.fullmatch(raw_step):
            raise GapwatchError(f"{self.source}: line {number}: {STEP} {shown(raw_step)} is not a whole number")
        step = step_digits(raw_step.split(".")[0], f"{self.source}: line {number}", STEP)
        names, values = [], []
        for name, raw in stats.items():
            if name in _POSITION:
                continue
            value = printed_number(raw)
            if value is None:
                self.not_a_number(f"{tag}/{name}", str(raw), number)
                continue
            names.append(f"{tag}/{name}")
            values.append(value)
        self.rows.at_step(number, step)
        self.rows.add_line(step, names, values)


def _json_stats(body: str, tag: str) -> dict | None:
    """A JSON line's stats; those of an epoch's summary or a validation carry the tag as a prefix
    (`valid_loss`), left off here."""
    try:
        stats = json.loads(body)
    except (ValueError, RecursionError):  # a line that only looks like stats
        return None
    if not isinstance(stats, dict):
        return None
    prefix = tag + "_"
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in stats.items()}


def _simple_stats(body: str) -> dict | None:
    """A simple-format line's stats: `name=value, ...` after the interval's position, or an epoch
    summary's and a validation's `name value | ...` after their `epoch 001 | ...` prefix."""
    inner = _SIMPLE_INNER.match(body)
    if inner:
        pairs = (p.partition("=") for p in inner.group(1).split(", "))
        return {k.strip(): v.strip() for k, eq, v in pairs if eq}
    out = {}
    for field in body.split(" | "):
        name, _, value = field.strip().rpartition(" ")
        if name and " " not in name:
            out[name] = value
    return out


def _config(text: str) -> dict:
    """The configuration fairseq prints as a Python dict literal; {} for one that is not."""
    try:
        config = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return config if isinstance(config, dict) else {}


FORMAT = Format("fairseq-log", lambda source, options: parse_fairseq_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="fairseq",
                tail=tail_of(_Parser))
