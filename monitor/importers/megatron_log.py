"""The stdout training logs of Megatron-LM and its descendants (Megatron-DeepSpeed, GPT-NeoX,
nanotron, NVIDIA NeMo): one line per logged iteration, its fields `name: value` between ` | `.

Recognised lines (anything else, such as NCCL chatter or the timers' tables, is ignored; a rank
prefix such as `0: ` or `[default0]:` and a timestamp may come first):

    [2024-05-01 10:00:00] iteration 10/ 2000 | consumed samples: 2560 | elapsed time per
        iteration (ms): 512.3 | learning rate: 3.000000E-04 | lm loss: 1.023456E+01 | ...
                                                                        Megatron-LM
    samples/sec: 98.1 | iteration 10/ 320000 | elapsed time per iteration (ms): 1234.5 | ...
                                                                        GPT-NeoX
    ...]: iteration: 10 / 2000 | consumed_tokens: 1.31M | lm_loss: 10.1 | lr: 0.0003 | ...
                                                                        nanotron
    Training epoch 0, iteration 10/249 | lr: 2e-05 | global_step: 10 | reduced_train_loss: 1.3 |
        train_step_timing in s: 2.5 | ...     NVIDIA NeMo (its global_step is the step)
    validation loss at iteration 200 | lm loss value: 3.2E+00 | lm loss PPL: 24.5 |
    validation loss at iteration 200 on test set | ...      (also `[set]`, `for test data`,
    validation results at iteration 200 | lm_loss value: ...  `at the end of training`,
    test results at the end of training | lm_loss value: ...  GPT-NeoX's test set)

Source names as emitted (the `megatron` profile maps Megatron-LM's; nanotron's and NeoX's go
through the inference every source gets): a training line's field names as written
(`lm loss`, `learning rate`, `elapsed time per iteration (ms)`); a validation line's as Megatron's
own TensorBoard writer names them, `<name> validation` (`lm loss validation`), then the set when
the line names one other than the validation set (`lm loss validation test`), and a perplexity
as `<name> validation ppl`.

Rules:
* A value is a number, optionally with nanotron's K/M/G/T/P suffix (powers of 1000). A field
  whose value is anything else (`100.0TFLOPS`) is left out, with one note per field name.
* A validation line "at the end of training" is at the last iteration logged before it; where
  that set already has a value at that step, the periodic one is kept.
* A last line without its newline is still being written: it is left out (and noted).
* A line that logs a series at a lower step than that series last had is a restart (a resumed job
  appending to the same log): a new attempt starts there (logged_rows.py).
* Megatron-LM's argument block (`---- arguments ----` to `---- end of arguments ----`) fills
  `config`; `global_batch_size` x `seq_length` gives tokens_per_step unless the batch size ramps
  up (`rampup_batch_size`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import setting, shown, step_digits
from .line_tail import LineParser, read_whole, tail_of

_ITERATION = re.compile(r"\biteration:?\s+(\d+)\s*/\s*\d+\s*$")
_VALIDATION = re.compile(
    r"\b(validation|test) (?:loss|results) at (?:iteration (\d+)|the end of training)"
    r"(?: (?:on|for) (\w+) (?:set|data))?(?: \[([^\]]+)\])?\s*$")
_FIELDS = re.compile(r"\s\|(?:\s|$)")
_GLOBAL_STEP = re.compile(r"\s*global_step\s*:\s*(\d+)\s*")
_NUMBER = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))([KMGTP]?)", re.IGNORECASE)
_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
# Sets a validation line names that are the validation set itself.
_VALIDATION_SETS = {"validation", "valid", "val"}
_ARGS_START = re.compile(r"-+ arguments -+\s*$")
_ARGS_END = re.compile(r"-+ end of arguments -+\s*$")
_ARG = re.compile(r"(?:^|\s)(\w+) \.{2,} (.*?)\s*$")


def _segments(line: str) -> list[str]:
    return _FIELDS.split(line.rstrip())


def _has_fields(line: str) -> bool:
    return " | " in line or line.rstrip().endswith(" |")


def _is_log_line(line: str) -> bool:
    return _has_fields(line) and any(_ITERATION.search(s) or _VALIDATION.search(s) for s in _segments(line)[:2])


def sniff(head: str) -> bool:
    """True if the first part of a file holds an iteration or validation line of this shape, or
    Megatron-LM's argument block."""
    return any(_is_log_line(line) or _ARGS_START.search(line) for line in head.splitlines())


def parse_megatron_log(path: str | Path) -> ImportedRun:
    """Parse one Megatron-LM / GPT-NeoX / nanotron training log into an ImportedRun, a block of
    lines at a time: a log of a million iterations is never held whole."""
    return read_whole(path, _LogParser(str(path)),
                      "no Megatron-LM, GPT-NeoX or nanotron iteration lines with values found")


class _LogParser(LineParser):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.last_step: int | None = None
        self.last_logged: dict[str, int] = {}  # validation series -> the step it was last logged at
        self.in_arguments = False  # the config is Megatron-LM's argument block

    def feed(self, number: int, line: str) -> None:
        if self._argument(line) or not _has_fields(line):
            return
        segments = _segments(line)
        for i, segment in enumerate(segments[:2]):
            m = _ITERATION.search(segment)
            if m:
                # GPT-NeoX writes samples/sec before the iteration: every other segment is a field.
                fields = segments[:i] + segments[i + 1:]
                # NeMo counts iterations within an epoch; its global_step is the trainer's step.
                steps = ([g.group(1) for f in fields if (g := _GLOBAL_STEP.fullmatch(f))]
                         if "global_step" in line else [])
                step = self._step(number, steps[0] if steps else m.group(1))
                self.last_step = step
                self._fields(number, step, fields)
                return
            m = _VALIDATION.search(segment)
            if m:
                self._validation(number, m, segments[i + 1:])
                return

    def _argument(self, line: str) -> bool:
        """Whether the line belongs to Megatron-LM's argument block: its `name ..... value` lines
        fill `config`, numbers and True/False/None read as such."""
        if not self.in_arguments and "arguments" not in line:
            return False
        if _ARGS_START.search(line):
            self.in_arguments = True
        elif self.in_arguments and _ARGS_END.search(line):
            self.in_arguments = False
        elif self.in_arguments and (m := _ARG.search(line)):
            self.config[m.group(1)] = setting(m.group(2))
        else:
            return False
        return True

    def _validation(self, number: int, m: re.Match, fields: list[str]) -> None:
        kind, iteration, data, bracketed = m.groups()
        at_end = iteration is None
        if at_end and self.last_step is None:
            self._leave_out("validation at the end of training", f"line {number}: a validation at the end of "
                            "training before any iteration was logged: left out")
            return
        step = self.last_step if at_end else self._step(number, iteration)
        named = (bracketed or data or kind).lower()
        where = "" if named in _VALIDATION_SETS else f" {named}"

        def name_of(field: str) -> str:
            base = re.sub(r"\s+value$", "", field)
            ppl = re.match(r"(.*?)[ _](?:ppl|PPL)$", base)
            return f"{ppl.group(1)} validation ppl{where}" if ppl else f"{base} validation{where}"

        self._fields(number, step, fields, name_of, validation=True, keep_earlier=at_end)

    def _fields(self, number: int, step: int, fields: list[str], name_of=None, validation: bool = False,
                keep_earlier: bool = False) -> None:
        """The `name: value` fields of a line at `step`, named by `name_of` (a training line's as
        written). A validation line's steps are remembered, so that the one at the end of training
        (`keep_earlier`) keeps a periodic value at the same step."""
        self.rows.at_step(number, step)
        names, values = [], []
        for field in fields:
            raw_name, colon, raw = field.partition(":")
            raw_name, raw = raw_name.strip(), raw.strip()
            if not (colon and raw_name and raw):
                continue
            value = self._number(raw)
            if value is None:
                self._leave_out(raw_name, f"{raw_name!r}: value {shown(raw)} (line {number}) is not a number: left out")
                continue
            name = name_of(raw_name) if name_of else raw_name
            if validation:
                if keep_earlier and self.last_logged.get(name) == step:
                    continue
                self.last_logged[name] = step
            names.append(name)
            values.append(value)
        self.rows.add_line(step, names, values)

    def _step(self, number: int, digits: str) -> int:
        return step_digits(digits, f"{self.source}: line {number}", "iteration")

    @staticmethod
    def _number(raw: str) -> float | None:
        try:
            value = float(raw)
        except ValueError:
            m = _NUMBER.fullmatch(raw)  # nanotron's 1.31M
            if not m:
                return None
            value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
        # A number too large for a float is no value; nan and inf written as such are.
        return value if math.isfinite(value) or raw.lower().lstrip("+-") in ("nan", "inf", "infinity") else None

    def _leave_out(self, name: str, note: str) -> None:
        self.left_out.setdefault(name, f"{self.source}: {note}")

    def tokens_per_step(self) -> float | None:
        batch, length = self.config.get("global_batch_size"), self.config.get("seq_length")
        if isinstance(batch, int) and isinstance(length, int) and self.config.get("rampup_batch_size") is None:
            return float(batch * length)
        return None


FORMAT = Format("megatron-log", lambda source, options: parse_megatron_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="megatron",
                tail=tail_of(_LogParser))
