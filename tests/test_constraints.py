"""pyproject.toml's ranges and constraints.txt's exact versions agree, and every build installs from
the constraints: what `make`, CI and the image install is what the tests passed with."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    out = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not an exact pin"
            out[canonicalize_name(name)] = version
    return out


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return [Requirement(r) for r in requirements if not r.startswith("gapwatch[")]


def test_every_declared_dependency_is_pinned_inside_its_range():
    pinned = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is declared but not pinned in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), \
            f"constraints.txt pins {name}=={pinned[name]}, outside pyproject.toml's {requirement}"


def test_the_core_is_declared_as_ranges_and_torch_exactly():
    for requirement in declared():
        exact = [s for s in requirement.specifier if s.operator == "=="]
        if requirement.name == "torch":
            assert str(requirement.specifier) == "==2.13.0"  # the CPU wheel; unpinned means a CUDA build
        else:
            assert not exact, f"{requirement} is an exact pin: pyproject.toml declares ranges"
    assert pins()["torch"] == "2.13.0"


def test_make_and_the_image_install_from_the_constraints():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"pip install .*-c constraints\.txt -e '\.\[all,test\]'", makefile)
    assert re.search(r"^\$\(STAMP\): pyproject\.toml constraints\.txt$", makefile, re.M)
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY pyproject.toml README.md constraints.txt ./" in dockerfile
    assert "pip install -c constraints.txt '.[trainer]'" in dockerfile
