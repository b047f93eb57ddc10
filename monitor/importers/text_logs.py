"""Text training logs of llm.c, modded-nanogpt, nanoGPT and torchtune.

Recognised lines (anything else, such as the training script modded-nanogpt prints before its log
or nvidia-smi tables, is ignored):

    s:N trl:X lr:Y norm:Z              llm.c log file (train loss, learning rate, grad norm)
    s:N tel:X                          llm.c log file (validation loss); `s:N eval:X` HellaSwag
    step:N/M train_loss:X train_time:Tms step_avg:Ams        modded-nanogpt
    step:N/M val_loss:X train_time:Tms step_avg:Ams          modded-nanogpt
    iter N: loss X, time Tms, mfu M%   nanoGPT stdout
    step N: train loss X, val loss Y   nanoGPT stdout (losses estimated at eval time)
    Step N | loss:X lr:Y tokens_per_second_per_gpu:Z       torchtune's DiskLogger and StdoutLogger

Source names as emitted (the `llmc` profile maps them): the llm.c/modded names as written
(`trl`, `tel`, `lr`, `norm`, `eval`, `train_loss`, `val_loss`), `train_time_ms` (cumulative
training clock), `step_time_ms` (derived: the training clock's advance between consecutive train
lines divided by the steps between them; omitted where the clock went back, which modded-nanogpt
does on purpose after step 10 to leave compilation out), and for nanoGPT `loss`, `time_ms`,
`mfu_percent` (nanoGPT prints -100% until its running MFU estimate exists: the import leaves
those out, as every negative MFU), `eval_train_loss`, `eval_val_loss`. `step_avg` is a running mean of step_time_ms and is not kept.

Rules:
* A line that starts like a log line but does not parse is an error naming the line.
* A last line without its newline is still being written: it is left out (and noted), so a log
  that a trainer is appending to imports cleanly.
* A line that logs a series at a lower step than that series last had is a restart: the trainer
  resumed from a checkpoint and logs those steps again. A new attempt starts there, its values win
  over the earlier ones for the same steps, and a `restart` event records where it happened
  (logged_rows.py).
* modded-nanogpt's `Hyperparameters` block in the script preamble fills `config`, and
  batch_size x sequence_length gives tokens_per_step.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from pathlib import Path

from monitor.errors import GapwatchError

from .formats import Format
from .generic_table import JSONL_SUFFIXES
from .imported_run import ImportedRun
from .input_checks import UnfitNumber, shown, step_digits, unfit_literal
from .line_tail import LineParser, read_whole, tail_of


_LLMC = re.compile(r"s:(\d+)((?: [A-Za-z_]+:\S+)+)\s*")
_MODDED = re.compile(r"step:(\d+)/(\d+)((?: [A-Za-z_]+:\S+)+)\s*")
_NANOGPT_ITER = re.compile(
    r"iter (\d+): loss (\S+), time (\S+)ms, mfu (\S+)%\s*"
)
_NANOGPT_EVAL = re.compile(r"step (\d+): train loss (\S+), val loss (\S+)\s*")
_TORCHTUNE = re.compile(r"Step (\d+) \|((?: [A-Za-z_][\w/.-]*:\S+)*)\s*")
# Lines that claim to be log lines: these must parse.
_LOOKS_LIKE_LOG = re.compile(r"(s:\d|step:\d|iter \d+:|step \d+:|Step \d+ \|)")
_PAIR = re.compile(r"([A-Za-z_]+):(\S+)")
_NAMED_PAIR = re.compile(r"([A-Za-z_][\w/.-]*):(\S+)")  # torchtune's names: any the recipe logs
# No setting of a training script is an integer of more bits than this.
_MAX_POW_BITS = 4096
_HYPERPARAM = re.compile(r"^\s+(\w+)\s*:\s*\w+\s*=\s*([^#\n]+?)\s*(?:#.*)?$")
# modded-nanogpt writes the running mean of step time; it is a derived value, not kept.
_DERIVED_NAMES = {"step_avg"}


def sniff(head: str) -> bool:
    """True if the first part of a file contains lines this parser reads."""
    return any(_LOOKS_LIKE_LOG.match(line) for line in head.splitlines())


def parse_text_log(path: str | Path) -> ImportedRun:
    """Parse one llm.c / modded-nanogpt / nanoGPT / torchtune log file into an ImportedRun."""
    return read_whole(path, _LogParser(str(path)), "no llm.c, modded-nanogpt, nanoGPT or torchtune log lines found")


class _LogParser(LineParser):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.last_train: tuple[int, float, int] | None = None  # (step, train_time_ms, attempt)
        self.in_hyperparameters = False  # inside modded-nanogpt's Hyperparameters block

    def feed(self, number: int, line: str) -> None:
        if self._hyperparameter(line) or not _LOOKS_LIKE_LOG.match(line):
            return
        m = _LLMC.fullmatch(line)
        if m:
            self._pairs(number, self._step_text(number, m.group(1)), m.group(2))
            return
        m = _MODDED.fullmatch(line)
        if m:
            self._pairs(number, self._step_text(number, m.group(1)), m.group(3))
            return
        m = _NANOGPT_ITER.fullmatch(line)
        if m:
            step = self._step(number, self._step_text(number, m.group(1)))
            self._add(number, step, "loss", m.group(2))
            self._add(number, step, "time_ms", m.group(3))
            # -100% before its first estimate: the import leaves negative MFU out (normalize.py).
            self._add(number, step, "mfu_percent", m.group(4))
            return
        m = _TORCHTUNE.fullmatch(line)
        if m:
            self._pairs(number, self._step_text(number, m.group(1)), m.group(2), _NAMED_PAIR)
            return
        m = _NANOGPT_EVAL.fullmatch(line)
        if m:
            step = self._step(number, self._step_text(number, m.group(1)))
            self._add(number, step, "eval_train_loss", m.group(2))
            self._add(number, step, "eval_val_loss", m.group(3))
            return
        raise GapwatchError(
            f"{self.source}: line {number}: looks like a log line but does not parse: "
            f"{shown(line.strip())}"
        )

    def _pairs(self, number: int, step: int, rest: str, pair: re.Pattern = _PAIR) -> None:
        step = self._step(number, step)
        pairs = pair.findall(rest)
        is_train = any(name in ("trl", "train_loss") for name, _ in pairs)
        for name, raw in pairs:
            if name in _DERIVED_NAMES:
                continue
            if raw.endswith("ms"):
                name, raw = f"{name}_ms", raw[:-2]
            value = self._number(number, name, raw)
            self._append(step, name, value)
            if name == "train_time_ms" and is_train:
                self._step_time(step, value)

    def _step_time(self, step: int, train_time_ms: float) -> None:
        prev = self.last_train
        self.last_train = (step, train_time_ms, self.rows.attempt)
        # A restarted training clock is not compared with the old one.
        if prev is None or prev[2] != self.rows.attempt or step <= prev[0]:
            return
        advance = train_time_ms - prev[1]
        # No advance means the training clock was reset: that step gets no step time.
        if advance > 0:
            self._append(step, "step_time_ms", advance / (step - prev[0]))

    def _step_text(self, number: int, digits: str) -> int:
        return step_digits(digits, f"{self.source}: line {number}")

    def _step(self, number: int, step: int) -> int:
        return self.rows.at_step(number, step)

    def _number(self, number: int, name: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise GapwatchError(
                f"{self.source}: line {number}: {name} value {shown(raw)} is not a number"
            ) from None
        if math.isinf(value) and unfit_literal(raw):
            raise GapwatchError(f"{self.source}: line {number}: {name}: "
                                f"{UnfitNumber(raw).describe()}")
        return value

    def _add(self, number: int, step: int, name: str, raw: str) -> None:
        self._append(step, name, self._number(number, name, raw))

    def _append(self, step: int, name: str, value: float) -> None:
        self.rows.add(step, name, value)

    def _hyperparameter(self, line: str) -> bool:
        """Whether the line opens or belongs to the script's first Hyperparameters dataclass, whose
        `name : type = value` lines fill `config`: values evaluated when they are arithmetic on
        literals (`8*64`, `int(0.75*2*10172)`), else kept as text."""
        if line.startswith("class Hyperparameters") and not self.config:
            self.in_hyperparameters = True
            return True
        if not self.in_hyperparameters:
            return False
        if line and not line[0].isspace():
            self.in_hyperparameters = False
            return False
        m = _HYPERPARAM.match(line)
        if m:
            self.config[m.group(1)] = _literal(m.group(2))
        return True

    def tokens_per_step(self) -> float | None:
        bs, seq = self.config.get("batch_size"), self.config.get("sequence_length")
        return float(bs * seq) if isinstance(bs, int) and isinstance(seq, int) else None


# --- the Hyperparameters block of a modded-nanogpt script -------------------------------------------
_SAFE_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def _literal(text: str):
    try:
        value = _eval(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError,
            MemoryError):
        return text.strip().strip("'\"")
    if isinstance(value, float) and value.is_integer() and "." not in text and "/" not in text:
        return int(value)
    return value


def _eval(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _SAFE_OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and _pow_too_big(left, right):
            raise ValueError("a power too large for a setting")
        return _SAFE_OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _SAFE_OPS:
        return _SAFE_OPS[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
        fn = {"int": int, "float": float}.get(node.func.id)
        if fn is not None:
            value = fn(_eval(node.args[0]))
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError("non-finite")
            return value
    raise ValueError("not a literal expression")


def _pow_too_big(base, exponent) -> bool:
    """An integer power of more than _MAX_POW_BITS bits: `9**9**9**9` would compute for ever."""
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0:
        return False
    return max(abs(base), 1).bit_length() * exponent > _MAX_POW_BITS


# A JSON file is never a text log, whatever its lines look like.
FORMAT = Format("llmc-log", lambda source, options: parse_text_log(source),
                lambda probe: probe.suffix not in JSONL_SUFFIXES and sniff(probe.head), profile="llmc",
                tail=tail_of(_LogParser))
