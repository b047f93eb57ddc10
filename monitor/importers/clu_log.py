"""The console log of a JAX trainer that reports through CLU's metric writers (Flax's examples,
and the trainers built like them): CLU's `LoggingWriter` writes each `write_scalars` call as one
absl INFO line, the step in brackets, then the scalars sorted by name, `name=value` a comma apart
(a Python float printed to 6 significant digits, anything else as `str` prints it):

    I1207 10:00:01.123456 140231 logging_writer.py:48] [1000] train_learning_rate=0.0016, train_loss=4.12
    INFO:absl:[1000] eval_loss=4.3, eval_perplexity=73.7           (absl before `app.run` set it up)

A writer made for a collection adds ` collection=<name>` after the step; its names are read
under `<name>/`, as the TensorBoard reader reads that collection's folder. The hyperparameters
line (`[Hyperparameters] {...}`, a dict's repr) is the run's config where it is a Python literal;
so are the one-line bindings of the gin config T5X logs from gin_utils.py (t5x_gin.py).
Lines about images, texts, histograms and other non-scalars are not metrics and are passed over.

The step is the trainer's own, as the writer got it. A step lower than a series last had is a
restart (logged_rows.py): a job resumed from a checkpoint in the same log. A last line without its
newline is still being written: it is left out, with a note.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from . import t5x_gin
from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import printed_number, shown, step_digits
from .line_tail import LineParser, read_whole, tail_of

# absl's own prefix (severity, date, time, thread, file:line) or Python logging's default one.
_PREFIX = r"(?:[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]+\] |INFO:absl:)"
_SCALARS = re.compile(_PREFIX + r"\[(\d+)\](?: collection=(\S+))? (.*)$")
_HPARAMS = re.compile(_PREFIX + r"\[Hyperparameters\](?: collection=\S+)? (.*)$")
# T5X logs its gin config a line at a time from gin_utils.py (absl's prefix names the file).
_GIN = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ gin_utils\.py:\d+\] (.*)$")
# `name=value`, up to the next `, name=` or the line's end.
_FIELD = re.compile(r"([^\s=,][^=,]*)=(.*?)(?=, [^\s=,][^=,]*=|$)")
# What LoggingWriter writes for values that are not scalars.
_NOT_SCALARS = ("Got ", "Histogram for ")


def sniff(head: str) -> bool:
    """True if the first part of a file holds a LoggingWriter line of scalars."""
    return any((m := _SCALARS.search(line)) and not m.group(3).startswith(_NOT_SCALARS) and _FIELD.match(m.group(3))
               for line in head.splitlines())


def parse_clu_log(path: str | Path) -> ImportedRun:
    """One console log with CLU LoggingWriter lines, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no CLU LoggingWriter lines of scalars found")


class _Parser(LineParser):
    def feed(self, number: int, line: str) -> None:
        found = _SCALARS.search(line)
        if found is None:
            hparams = _HPARAMS.search(line)
            if hparams is not None:
                self._config(hparams.group(1), number)
            elif (gin := _GIN.search(line)) is not None:
                self.config.update(t5x_gin.gin_settings(gin.group(1)))
            return
        step_text, collection, rest = found.groups()
        if rest.startswith(_NOT_SCALARS):
            return
        step = self.rows.at_step(number, step_digits(step_text, f"{self.source}: line {number}"))
        for name, raw in _FIELD.findall(rest):
            name = f"{collection}/{name}" if collection else name
            value = printed_number(raw.strip())
            if value is None:
                self.not_a_number(name, raw, number)
                continue
            self.rows.add(step, name, value)

    def profile_hint(self) -> str | None:
        return t5x_gin.profile_for(self.config) if t5x_gin.is_t5x(self.rows.names.all) else None

    def notes(self) -> list[str]:
        unknown = t5x_gin.is_t5x(self.rows.names.all) and self.profile_hint() is None
        return super().notes() + ([t5x_gin.unknown_note(self.source)] if unknown else [])

    def _config(self, text: str, number: int) -> None:
        try:
            config = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            # A config holding objects (a ConfigDict's callables, say) prints no literal.
            self.left_out.setdefault("[Hyperparameters]", f"{self.source}: the hyperparameters line (line {number}) "
                                                          f"is no Python literal ({shown(text)}): not read")
            return
        if isinstance(config, dict):
            self.config.update({str(k): v for k, v in config.items()})


FORMAT = Format("clu-log", lambda source, options: parse_clu_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="flax",
                tail=tail_of(_Parser))
