"""`gapwatch --help` lists every subcommand and each answers --help."""

from __future__ import annotations

import subprocess
import sys

from app.cli import build_parser


def subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)


def test_help_lists_every_subcommand():
    out = subprocess.run([sys.executable, "-m", "app", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    names = subcommands()
    assert "runs" in names
    for name in names:
        assert name in out.stdout


def test_each_subcommand_has_help():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    for name, sub in action.choices.items():
        text = sub.format_help()
        assert text.startswith("usage: gapwatch " + name), name


def test_no_command_prints_help_and_fails():
    out = subprocess.run([sys.executable, "-m", "app"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "usage: gapwatch" in out.stdout
