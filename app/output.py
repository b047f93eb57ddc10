"""How commands print rows and progress: a table for a person at a terminal, plain lines for a pipe.

At a terminal, rows are a rich table whose identifying columns (run names, metrics, paths) are never
cut or wrapped; long free text wraps. Into a pipe or a file, each row is one line of tab-separated
fields after a header line, never truncated, so `cut -f`, `grep` and `awk` read it. Progress goes
to stderr: a spinner at a terminal, one line per phase otherwise, so a CI log shows what a slow
command is doing.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO


def ago(seconds: float | None) -> str:
    """How long ago, in the unit a person reads at a glance ("—" when unknown)."""
    if seconds is None or math.isnan(seconds):
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h ago"
    days = seconds / 86400
    if days < 60:
        return f"{days:.1f} days ago"
    if days < 2 * 365.25:
        return f"{days / (365.25 / 12):.0f} months ago"
    return f"{days / 365.25:.1f} years ago"


# Narrowest a wrapped free-text column may get in a table before rows are printed one below the other.
MIN_WRAPPED_WIDTH = 30


@dataclass(frozen=True)
class Column:
    name: str
    wraps: bool = False
    """Free text that may wrap at a terminal; every other column is printed whole on one line."""
    right: bool = False


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def plain_cell(value: object) -> str:
    """A field of a plain row: tabs and line breaks inside a value would split the row."""
    return " ".join(str(value).split()) if value is not None else "-"


def print_rows(columns: Sequence[Column], rows: Sequence[Sequence[object]], title: str | None = None,
               stream: TextIO | None = None, styles: Sequence[str | None] | None = None) -> None:
    """`rows` as a table at a terminal, else as tab-separated lines under a header line. `styles`:
    an optional rich style per row (terminal only)."""
    stream = stream or sys.stdout
    if not is_terminal(stream):
        stream.write("\t".join(c.name for c in columns) + "\n")
        for row in rows:
            stream.write("\t".join(plain_cell(v) for v in row) + "\n")
        stream.flush()
        return
    from rich.console import Console
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream, highlight=False)
    cells = [[str(v) if v is not None else "-" for v in row] for row in rows]
    widths = [max([len(c.name)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    whole = sum(w + 3 for c, w in zip(columns, widths) if not c.wraps)
    if whole + MIN_WRAPPED_WIDTH > console.width:
        # Too narrow for a table whose names stay whole: each row is a line of its whole fields,
        # its free text indented below it.
        if title:
            console.print(Text(title, style="italic"))
        console.print(Text("  ".join(c.name for c in columns if not c.wraps), style="bold"), soft_wrap=True)
        for i, row in enumerate(cells):
            style = styles[i] if styles else None
            console.print(Text("  ".join(v for c, v in zip(columns, row) if not c.wraps), style=style), soft_wrap=True)
            for c, v in zip(columns, row):
                if c.wraps:
                    console.print(Padding(Text(v), (0, 0, 0, 4)))
        return
    table = Table(title=title)
    for c, width in zip(columns, widths):
        if c.wraps:
            table.add_column(c.name, ratio=1, overflow="fold")
        else:
            table.add_column(c.name, no_wrap=True, justify="right" if c.right else "left", min_width=width)
    for i, row in enumerate(cells):
        table.add_row(*row, style=styles[i] if styles else None)
    console.print(table)


@contextmanager
def phases(command: str, stream: TextIO | None = None) -> Iterator[Callable[[str], None]]:
    """A `progress(message)` callable for the phases of a command that can take seconds: a spinner
    at a terminal, else one stderr line per phase with the seconds since the command began."""
    stream = stream or sys.stderr
    started = time.perf_counter()
    if not is_terminal(stream):
        def line(message: str) -> None:
            stream.write(f"gapwatch {command}: [{time.perf_counter() - started:6.1f}s] {message.strip()}\n")
            stream.flush()

        yield line
        return
    from rich.console import Console

    with Console(file=stream).status(command, spinner="dots") as status:
        yield lambda message: status.update(f"{command}: {message.strip()}")
