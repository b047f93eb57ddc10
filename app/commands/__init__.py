"""Subcommands of the `gapwatch` CLI, one module each (see app/cli.py)."""
