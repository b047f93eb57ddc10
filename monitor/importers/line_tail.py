"""A text log a trainer appends to, read a whole line at a time from where the last read stopped.

Each console-log reader (Megatron-LM's, fairseq's, Composer's, OLMo-core's, torchtitan's,
MaxText's, the Hugging Face Trainer's) is a `LineParser`, fed the log's lines in turn. `LineTail` feeds it the lines written
since its last read: `import --follow` reads a growing log a poll at a time (a format's `tail`),
never again from its start, and a whole import is one read (`read_whole`). Lines end where
Python's text mode ends them: at a newline, a carriage return and newline, or a carriage return
alone (a progress bar redrawn in place). A last line without its line end is still being written:
it waits for the next read, and a whole import says it was left out.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from monitor.errors import GapwatchError

from .imported_run import ImportedRun
from .input_checks import shown
from .logged_rows import LoggedRows


class LineParser(ABC):
    """A log's reader between its lines: `feed` takes each line; the rows, restarts, notes and
    config read so far are kept here."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows = LoggedRows()
        self.left_out: dict[str, str] = {}  # a name -> the note that says why its values were left out
        self.config: dict = {}

    @abstractmethod
    def feed(self, number: int, line: str) -> None:
        """Line `number` (from 1), its line end left off: each reader's own rule."""

    def not_a_number(self, name: str, raw: str, number: int) -> None:
        """A value of `name` that is no number: left out, one note a name."""
        self.left_out.setdefault(name, f"{self.source}: {name}: value {shown(raw)} (line {number}) is not a "
                                       "number: left out")

    def notes(self) -> list[str]:
        return list(self.left_out.values())

    def tokens_per_step(self) -> float | None:
        """Tokens in an optimizer step, where the log's config says."""
        return None

    def profile_hint(self) -> str | None:
        """The profile the log's own lines say its names follow (T5X's gin config), if any."""
        return None


class LineTail:
    """`parser` fed the whole lines of the log at `path` written since the last `read`."""

    BLOCK_BYTES = 8 << 20

    def __init__(self, path: str | Path, parser: LineParser) -> None:
        self.path = Path(path)
        self.parser = parser
        self.offset = 0  # bytes read, up to the end of the last whole line
        self.number = 0  # lines read
        self.events_told = 0

    def read(self) -> ImportedRun:
        """The rows and restarts of the whole lines written since the last read."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                while block := fh.read(self.BLOCK_BYTES):
                    end = _whole_lines_end(block)
                    if end == 0:  # no whole line in it: a line longer than a block, or one being written
                        if len(block) < self.BLOCK_BYTES:
                            break
                        raise GapwatchError(f"{self.path}: line {self.number + 1} is longer than "
                                            f"{self.BLOCK_BYTES >> 20} MiB: not a training log")
                    text = block[:end].decode("utf-8", errors="replace")
                    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")[:-1]:
                        self.number += 1
                        self.parser.feed(self.number, line)
                    self.offset += end
                    fh.seek(self.offset)
        except OSError as exc:
            raise GapwatchError(f"{self.path}: cannot read: {exc.strerror}") from None
        rows = self.parser.rows
        events, self.events_told = rows.events[self.events_told:], len(rows.events)
        return ImportedRun(name_hint=self.path.stem, scalars=rows.take(with_wall_time=False), events=events,
                           source=str(self.path), notes=self.parser.notes(), config=dict(self.parser.config),
                           tokens_per_step=self.parser.tokens_per_step(), profile=self.parser.profile_hint())

    def unfinished(self) -> bool:
        """Whether the file goes on past the last whole line (a line still being written)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                return bool(fh.read(self.BLOCK_BYTES).strip())
        except OSError:
            return False


def _whole_lines_end(block: bytes) -> int:
    """Where the block's last whole line ends: after its last newline, or after a carriage return
    that is followed by more (one at the block's end may be the first half of a CR LF)."""
    newline = block.rfind(b"\n") + 1
    cr = block.rfind(b"\r", newline, len(block) - 1) + 1
    return max(newline, cr)


def tail_of(parser: Callable[[str], LineParser]) -> Callable[[str | Path], LineTail]:
    """A format's `tail`: its log at a path, read on by a parser of its own (`parser(source)`)."""
    return lambda path: LineTail(path, parser(str(path)))


def read_whole(path: str | Path, parser: LineParser, nothing: str) -> ImportedRun:
    """The whole log, read once; `nothing`: why a log without rows is refused (after its path)."""
    tail = LineTail(path, parser)
    run = tail.read()
    if tail.unfinished():
        run.notes.append(f"{path}: line {tail.number + 1} has no newline yet (still being written): left out")
    if not len(run.scalars):
        raise GapwatchError(f"{path}: {nothing}")
    return run
