"""Rows for a person and for a pipe (app/output.py): never a cut name, whatever the width."""

from __future__ import annotations

import io

import pytest

from app.output import Column, ago, phases, print_rows

NAMES = ["olmo1b-ladder-run-with-a-name-too-long-to-fit", "olmo1b-ladder-rerun-with-a-name-too-long-to-fit"]
COLUMNS = [Column("run"), Column("steps", right=True), Column("finding", wraps=True)]
ROWS = [[name, "1–2,099", "train/loss 0.210 below the reference over 21 windows " * 3] for name in NAMES]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_gets_one_tab_separated_line_per_row():
    out = io.StringIO()
    print_rows(COLUMNS, [[*ROWS[0][:2], "two\tlines\nof text"]], stream=out)
    assert out.getvalue().splitlines() == ["run\tsteps\tfinding", f"{NAMES[0]}\t1–2,099\ttwo lines of text"]


@pytest.mark.parametrize("width", [40, 80, 200])
def test_a_terminal_of_any_width_shows_whole_names(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    out = Terminal()
    print_rows(COLUMNS, ROWS, title="findings", stream=out)
    text = out.getvalue()
    for name in NAMES:
        assert sum(name in line for line in text.splitlines()) == 1, text
    assert "…" not in text


def test_phases_print_a_line_each_into_a_log():
    log = io.StringIO()
    with phases("detect", log) as progress:
        progress("loading run")
        progress("  spike")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("gapwatch detect: [") and lines[1].endswith("] spike")


def test_ago_reads_in_the_unit_of_its_size():
    day = 86400
    assert [ago(s) for s in (None, 30, 600, 7200, 3 * day, 90 * day, 923.6 * day)] == [
        "—", "30 s ago", "10 min ago", "2.0 h ago", "3.0 days ago", "3 months ago", "2.5 years ago"]
