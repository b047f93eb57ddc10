"""A command whose extra is not installed says which one to install, in one line, and does nothing."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from app import extras
from app.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def without(monkeypatch):
    """Pretend the named top-level modules are not installed."""

    def hide(*names: str) -> None:
        real = importlib.util.find_spec
        monkeypatch.setattr(extras, "find_spec", lambda name: None if name in names else real(name))

    return hide


@pytest.mark.parametrize(("argv", "extra"), [
    (["train", "--steps", "1"], "trainer"),
    (["train", "--until-done"], "trainer"),
    (["eval", "--run", "r", "--checkpoint", "ckpt"], "trainer"),
    (["demo", "--no-serve"], "trainer"),
    (["parity", "a", "b"], "trainer"),
    (["parity", "--against", "hf"], "parity"),
])
def test_a_command_names_its_missing_extra_in_one_line(without, capsys, tmp_path, monkeypatch, argv, extra):
    monkeypatch.chdir(tmp_path)
    without("jax", "torch")
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert f"pip install 'gapwatch[{extra}]'" in err and "jax" in err
    assert list(tmp_path.iterdir()) == []  # nothing started: no store, no demo folder


def test_parity_against_hf_names_torch_when_only_torch_is_missing(without, capsys):
    without("torch")
    assert main(["parity", "--against", "hf"]) == 2
    err = capsys.readouterr().err
    assert "(torch not installed): pip install 'gapwatch[parity]'" in err


def test_with_every_extra_installed_nothing_is_missing():
    for extra in extras.EXTRA_MODULES:
        extras.require_extra(extra)


def _extra_distributions(extra: str, declared: dict[str, list[str]]) -> set[str]:
    """The distributions an extra of pyproject.toml installs directly, its own extras included."""
    names = set()
    for requirement in declared[extra]:
        name, _, rest = re.match(r"([A-Za-z0-9_.-]+)(\[([^\]]*)\])?", requirement).group(1, 2, 3)
        if name == "gapwatch":
            for inner in rest.split(","):
                names |= _extra_distributions(inner.strip(), declared)
        else:
            names.add(name.lower().replace("_", "-"))
    return names


def test_the_modules_checked_are_the_ones_each_extra_installs():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    providers = importlib.metadata.packages_distributions()
    for extra, modules in extras.EXTRA_MODULES.items():
        installs = _extra_distributions(extra, declared)
        for module in modules:
            owners = {d.lower().replace("_", "-") for d in providers[module]}
            assert owners & installs, f"{module} comes from {owners}, which the {extra} extra does not install"
