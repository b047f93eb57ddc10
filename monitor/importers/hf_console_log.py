"""The console output of the Hugging Face Trainer (and of what runs on it: TRL, Axolotl,
LLaMA-Factory), as `python train.py > train.log 2>&1` keeps it: its tqdm progress bar redrawn in
place with carriage returns, and each logged dict written above the bar:

     8%|▊         | 5/60 [00:00<00:09,  5.69it/s]
    {'loss': '3.898', 'grad_norm': '0.82', 'learning_rate': '0.0009333', 'epoch': '0.05'}
     8%|▊         | 5/60 [00:00<00:09,  5.69it/s]
    {'eval_loss': '3.904', 'eval_runtime': '0.0145', ..., 'epoch': '0.2'}

A dict holds no step. The bar's count is the Trainer's global step, and tqdm draws the bar again
right after each dict it writes above it, at the count of the moment the dict was logged: a dict's
step is the count of the first training bar drawn after it. (The bar drawn before it may lag: tqdm
redraws at most ten times a second.) The evaluation's own bar is drawn a line below the training
bar, so each of its drawings carries the escape that moves the cursor back up (ESC [A), and a bar
of another total is another loop's (`trainer.evaluate()` after training): neither counts steps.

Values are printed as numbers (transformers 4) or as strings of four significant figures
(transformers 5): both are read as numbers; four figures of a loss are 0.001 nats, far below what
two runs of one recipe differ by. Names are those the Trainer's W&B and TensorBoard callbacks give
them (`loss` -> `train/loss`, `eval_loss` -> `eval/loss`, hf_trainer_state.source_name), so the
`hf` profile reads them as it reads a W&B run of the same Trainer.

Rules:
* A dict line is a Python dict literal of names and values with a numeric `epoch` (the Trainer
  adds it to every dict it logs) and the Trainer's own `learning_rate` (a training log) or
  `*_runtime` (an evaluation's, the summary's); another (a dict a loop of one's own printed beside
  its own bars) is passed over. A value that is not a number is left out with a note a name.
* A dict after the last training bar of a whole read has no step yet: left out, with a note; a
  followed log takes it when the bar is drawn.
* The bar's count going back (a `trainer.train(resume_from_checkpoint=...)` in the same log) is a
  restart at the lower step (logged_rows.py).
* Without the progress bar (`disable_tqdm=True`, or a process other than the main one) the log holds
  no step: such a file is not claimed; import the run's `trainer_state.json` instead.
* The file is recognised by a training bar in its first 64 KB and a logged dict in its first 4 MB
  (the Trainer logs every 500 steps unless told otherwise, and redraws its bar up to once a step
  until then); a log whose first dict comes later is imported with `--format hf-console-log`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .formats import Format, Probe
from .generic_table import JSONL_SUFFIXES
from .hf_trainer_state import source_name
from .imported_run import ImportedRun
from .input_checks import printed_number, step_digits
from .line_tail import LineParser, read_whole, tail_of

_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CURSOR_UP = "\x1b[A"
_BAR = re.compile(r"\|\s*(\d+)/(\d+) \[")
_DICT = re.compile(r"^\{'[^']+': .*\}$")


# How far into a file detection looks for the first logged dict, once the probe's head shows a
# training bar: far enough for the bar's redrawings before a Trainer's first log (module rules).
DICT_SEARCH_BYTES = 4 * 1024 * 1024


def recognize(probe: Probe) -> bool:
    """A training bar in the probe's head, and a dict the Trainer logged there or further on
    (module rules)."""
    head = re.split(r"[\r\n]", probe.head)
    if probe.is_dir or probe.suffix in JSONL_SUFFIXES or not _has_bar(head):
        return False
    if _has_dict(head):
        return True
    with open(probe.path, "rb") as fh:
        text = fh.read(DICT_SEARCH_BYTES).decode("utf-8", errors="replace")
    return _has_dict(re.split(r"[\r\n]", text))


def _has_bar(segments: list[str]) -> bool:
    return any(_BAR.search(s) and _CURSOR_UP not in s for s in segments)


def _has_dict(segments: list[str]) -> bool:
    return any(_logged_dict(_ESCAPE.sub("", s).strip()) is not None for s in segments)


def parse_hf_console_log(path: str | Path) -> ImportedRun:
    """One Hugging Face Trainer console log, a line at a time."""
    return read_whole(path, _Parser(str(path)), "no dict logged under a training progress bar found")


class _Parser(LineParser):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.total: int | None = None  # the training bar's total: the run's max_steps
        self.waiting: list[tuple[int, dict]] = []  # dicts (with their lines) waiting for the bar

    def feed(self, number: int, line: str) -> None:
        bar = _BAR.search(line)
        if bar is not None and _CURSOR_UP not in line:
            self._bar(number, step_digits(bar.group(1), f"{self.source}: line {number}"), int(bar.group(2)))
            return
        logged = _logged_dict(_ESCAPE.sub("", line).strip())
        if logged is not None:
            self.waiting.append((number, logged))

    def _bar(self, number: int, count: int, total: int) -> None:
        if self.total is None:
            self.total = total
            self.config["max_steps"] = total
        if total != self.total or not self.waiting:
            return
        step = self.rows.at_step(number, count)
        for line, logged in self.waiting:
            for name, raw in logged.items():
                value = raw if isinstance(raw, float) else printed_number(str(raw))
                if value is None:
                    self.not_a_number(name, str(raw), line)
                    continue
                self.rows.add(step, source_name(name), value)
        self.waiting = []

    def notes(self) -> list[str]:
        if not self.waiting:
            return super().notes()
        return [*super().notes(), f"{self.source}: {len(self.waiting)} logged dict(s) after the last progress bar "
                                  f"(line {self.waiting[0][0]} on): left out, their step is not in the file yet"]


def _logged_dict(text: str) -> dict | None:
    """The dict a line holds when it is one the Trainer logs (names to numbers or their text),
    else None."""
    if not _DICT.match(text):
        return None
    try:
        logged = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(logged, dict) or printed_number(str(logged.get("epoch"))) is None:
        return None  # the Trainer adds the epoch it is at to every dict it logs
    if "learning_rate" not in logged and not any(str(k).endswith("_runtime") for k in logged):
        return None  # nor one of the Trainer's own: a loop's own dict beside its own bars
    if not all(isinstance(k, str) and isinstance(v, (int, float, str)) and not isinstance(v, bool)
               for k, v in logged.items()):
        return None
    return {k: float(v) if isinstance(v, (int, float)) else v for k, v in logged.items()}


FORMAT = Format("hf-console-log", lambda source, options: parse_hf_console_log(source), recognize, profile="hf",
                tail=tail_of(_Parser))
