"""`python -m bench --quick` hands --quick to every benchmark: each must take it (an argparse error
ended the whole smoke run at the first one that did not)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import bench

NAMES = sorted(m.name for m in pkgutil.iter_modules([str(Path(bench.__file__).parent)]) if m.name.startswith("bench_"))


@pytest.mark.parametrize("name", NAMES)
def test_every_benchmark_takes_quick(name, capsys):
    module = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    assert "--quick" in capsys.readouterr().out
