"""The console log of a Levanter job (Stanford CRFM's JAX trainer, which Marin runs) whose tracker
is its JSON logger: every `tracker.log` call is one log line holding one JSON object, after
whatever prefix the job's logging puts before it:

    2025-03-04 10:00:01,123 - levanter.json_logger - INFO - {"tracker": "json_logger", "event": "log",
        "step": 100, "metrics": {"train/loss": 3.21, "global_step": 100, "run_progress": 0.01}}   (one line)

A `log` event's metrics (nested objects flattened with `/`, as the tracker's own summary does) are
rows at its step; a log with no step (`"step": null`: Levanter's lm-eval harness callback) is at the
step logged last, where W&B puts it too. The `hparams` event is the run's config; `summary`,
`artifact` and `finish` events hold no series. A histogram (an object with `bucket_counts`) is no
scalar and is left out, with a note, and so is any other value that is not a number.

A step lower than a series last had is a restart (logged_rows.py): the job resumed from a
checkpoint in the same log. A last line without its newline is still being written: it is left
out, with a note.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .formats import Format
from .imported_run import ImportedRun
from .input_checks import printed_number, step_digits
from .line_tail import LineParser, read_whole, tail_of

_RECORD = re.compile(r'(\{"tracker": "json_logger", .*\})\s*$')


def sniff(head: str) -> bool:
    """True if the first part of a file holds a JSON logger `log` line."""
    return any((m := _RECORD.search(line)) and '"event": "log"' in m.group(1) for line in head.splitlines())


def parse_levanter_log(path: str | Path) -> ImportedRun:
    """One Levanter console log with JSON logger lines, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no Levanter JSON logger lines with metrics found")


class _Parser(LineParser):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.last_step: int | None = None

    def feed(self, number: int, line: str) -> None:
        found = _RECORD.search(line)
        if found is None:
            return
        try:
            record = json.loads(found.group(1))
        except (ValueError, RecursionError):
            self.left_out.setdefault("json", f"{self.source}: line {number} holds no whole JSON object: left out")
            return
        event = record.get("event")
        if event == "hparams" and isinstance(record.get("hparams"), dict):
            self.config.update(record["hparams"])
        if event != "log" or not isinstance(record.get("metrics"), dict):
            return
        step = record.get("step")
        if step is None:
            step = self.last_step if self.last_step is not None else 0
        elif not isinstance(step, int) or isinstance(step, bool) or step < 0:
            self.left_out.setdefault("step", f"{self.source}: line {number}: step {step!r} is no step: left out")
            return
        step = self.rows.at_step(number, step_digits(str(step), f"{self.source}: line {number}"))
        self.last_step = step
        for name, value in _flat(record["metrics"]):
            if isinstance(value, dict):
                self.left_out.setdefault(name, f"{self.source}: {name} is a histogram (line {number}): left out")
                continue
            number_value = printed_number(value) if isinstance(value, (int, float)) else None
            if number_value is None:
                self.not_a_number(name, str(value), number)
                continue
            self.rows.add(step, name, number_value)


def _flat(metrics: dict, prefix: str = ""):
    """(name, value) of every metric, nested objects joined with `/`; a histogram stays whole."""
    for key, value in metrics.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict) and "bucket_counts" not in value:
            yield from _flat(value, name)
        else:
            yield name, value


# A file of the tracker's lines alone (`.jsonl`) is one too: no other JSON Lines log nests its
# values under "metrics".
FORMAT = Format("levanter-log", lambda source, options: parse_levanter_log(source),
                lambda probe: not probe.is_dir and sniff(probe.head), profile="levanter", tail=tail_of(_Parser))
