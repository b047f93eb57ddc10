"""The console log of MaxText (Google's JAX trainer): a line for each training step and one for each
evaluation, its fields `name: value` (training) or `name=value` (evaluation) a comma apart:

    completed step: 10, seconds: 1.234, TFLOP/s/device: 123.456, Tokens/s/device: 4567.890,
        total_weights: 65536, loss: 7.123                                          (one line)
    eval metrics after step: 499, loss=6.543, total_weights=131072

Source names are those its TensorBoard and metrics file give the same values, so the `maxtext`
profile maps them wherever they were logged: `loss` is `learning/loss`, `seconds` is
`perf/step_time_seconds`, `TFLOP/s/device` (`TFLOP/s` in older versions) is
`perf/per_device_tflops_per_sec`, `Tokens/s/device` is `perf/per_device_tokens_per_sec`, an
evaluation's `loss` is `eval/avg_loss`; a training field of another name (`mtp_loss`) goes under
`learning/`, an evaluation's under `eval/`. MaxText prints losses to three decimals: a rounding of
at most 0.0005, far below what two runs of one recipe differ by.

The step is MaxText's own (0 for the first step, as its TensorBoard numbers it). A step lower than
a series last had is a restart (logged_rows.py): the job resumed from a checkpoint in the same log.
A last line without its newline is still being written: it is left out, with a note.
"""

from __future__ import annotations

import re
from pathlib import Path

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import printed_number, step_digits
from .line_tail import LineParser, read_whole, tail_of

_TRAIN = re.compile(r"completed step: (\d+), (.*)$")
_EVAL = re.compile(r"eval metrics after step: (\d+),(.*)$")
_TRAIN_FIELD = re.compile(r"([^,:]+?): ([^,]+)")
_EVAL_FIELD = re.compile(r"([^,=]+?)=([^,]+)")
_TRAIN_NAMES = {"seconds": "perf/step_time_seconds", "TFLOP/s/device": "perf/per_device_tflops_per_sec",
                "TFLOP/s": "perf/per_device_tflops_per_sec", "Tokens/s/device": "perf/per_device_tokens_per_sec"}
_EVAL_NAMES = {"loss": "eval/avg_loss", "avg_mtp_acceptance_rate": "eval/avg_mtp_acceptance_rate_percent"}


def sniff(head: str) -> bool:
    """True if the first part of a file holds a MaxText step line with a value."""
    return any((m := _TRAIN.search(line)) and _TRAIN_FIELD.search(m.group(2)) for line in head.splitlines())


def parse_maxtext_log(path: str | Path) -> ImportedRun:
    """One MaxText console log, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no MaxText step lines with values found")


class _Parser(LineParser):
    def feed(self, number: int, line: str) -> None:
        train = _TRAIN.search(line)
        found = train or _EVAL.search(line)
        if found is None:
            return
        step = self.rows.at_step(number, step_digits(found.group(1), f"{self.source}: line {number}"))
        fields = (_TRAIN_FIELD if train else _EVAL_FIELD).findall(found.group(2))
        for name, raw in ((n.strip(), r.strip()) for n, r in fields):
            value = printed_number(raw.removesuffix("%"))
            if value is None:
                self.not_a_number(name, raw, number)
                continue
            self.rows.add(step, _train_name(name) if train else _EVAL_NAMES.get(name, f"eval/{name}"), value)


def _train_name(name: str) -> str:
    if name in _TRAIN_NAMES:
        return _TRAIN_NAMES[name]
    return name if "/" in name else f"learning/{name}"  # `learning/avg_reward` is printed whole


FORMAT = Format("maxtext-log", lambda source, options: parse_maxtext_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="maxtext",
                tail=tail_of(_Parser))
