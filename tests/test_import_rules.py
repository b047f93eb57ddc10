"""The one-way data flow of ARCHITECTURE.md, enforced: who may import whom.

Every import statement counts, including those inside functions.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = {"monitor", "evals", "trainer", "app"}
LEAVES = {"monitor.schema", "monitor.errors"}  # records and the user-error type: everyone's

# package -> (our modules it may import, or None for any) ; prefixes match submodules.
RULES: dict[str, set[str] | None] = {
    "monitor.detectors": {"monitor.detectors"} | LEAVES,
    "monitor": {"monitor"},
    "evals": {"evals", "monitor.client"} | LEAVES,
    "trainer": {"trainer", "evals", "monitor.client"} | LEAVES,
    "app": None,
}
# Detectors are pure: these third-party packages and the standard library, nothing else.
DETECTOR_THIRD_PARTY = {"numpy", "pandas", "scipy", "sklearn"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from monitor import store` imports monitor.store.
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names
                      if f"{target}.{alias.name}".split(".")[0] in OURS and alias.name != "*"]
    return found


def rule_for(module: str) -> tuple[str, set[str] | None]:
    for package in sorted(RULES, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return package, RULES[package]
    raise AssertionError(f"{module} belongs to no package of the architecture")


def allowed(target: str, permitted: set[str]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in permitted)


def is_our_module(target: str) -> bool:
    return target.split(".")[0] in OURS


SOURCES = sorted(p for pkg in OURS for p in (REPO / pkg).rglob("*.py"))


def violations(path: Path, module: str) -> list[str]:
    package, permitted = rule_for(module)
    found = []
    for line, target in imports_of(path, module):
        if is_our_module(target):
            # A parent package import (`import monitor`) says nothing about the flow.
            if permitted is not None and target not in OURS and not allowed(target, permitted):
                found.append(f"{module}:{line} imports {target} ({package} may not)")
        elif package == "monitor.detectors":
            root = target.split(".")[0]
            if root and root not in sys.stdlib_module_names and root not in DETECTOR_THIRD_PARTY and root != "__future__":
                found.append(f"{module}:{line} imports {target} (detectors are pure)")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_follow_the_architecture(path):
    found = violations(path, module_name(path))
    assert not found, "\n".join(found)


def test_the_checker_catches_violations(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sqlalchemy\nfrom monitor.store import open_store\nfrom ..store import tables\n")
    found = violations(probe, "monitor.detectors.probe")
    assert any("sqlalchemy (detectors are pure)" in v for v in found)
    assert any("imports monitor.store " in v for v in found)
    assert any("imports monitor.store.tables" in v for v in found)
    assert violations(probe, "monitor.importers.probe") == []
    probe.write_text("def f():\n    import trainer.model\n")
    assert violations(probe, "evals.probe") == ["evals.probe:2 imports trainer.model (evals may not)"]
