"""The `gapwatch` command line: one subcommand per module in `app/commands/`.

Each module there defines `register(subparsers)`, which adds its parser and sets `func` on it;
`func(args)` returns an exit code. Adding a command means adding a module, nothing else. Command
modules import heavy libraries (jax, dash, wandb) inside `func`, so `gapwatch --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from monitor.errors import GapwatchError

from app import commands


class Parser(argparse.ArgumentParser):
    """A parser that takes long options only as spelt out (its subcommands' parsers are of its
    class): argparse's default would read `import --reference ref` as `--reference-of ref`, the
    opposite link, without a word."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gapwatch",
        description="Watch long pre-training runs against a reference run.",
    )
    parser.add_argument("--version", action="version", version=f"gapwatch {installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def installed_version() -> str:
    """The version of the installed distribution (pyproject.toml's, once installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gapwatch")
    except PackageNotFoundError:
        return "unknown (not installed; run from a source tree)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except GapwatchError as exc:
        print(f"gapwatch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
