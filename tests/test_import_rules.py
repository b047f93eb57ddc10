"""The one-way data flow of docs/architecture.md, enforced: who may import whom, that only the store
speaks SQL, and that no modules import each other in a circle.

Every import statement counts, including those inside functions and under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import graphlib
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
# Only the store speaks SQL: its drivers and SQLAlchemy are imported nowhere else.
SQL_PACKAGES = {"sqlalchemy", "psycopg", "sqlite3"}
STORE = "monitor.store"
# The extras' stacks (pyproject.toml's trainer, evals and parity) and our packages built on them: the
# core (monitor/, app/) installs without them, so it never imports them as it loads. Only the
# commands (and the demo they run) import them, inside functions, after app/extras.py checked them.
EXTRA_PACKAGES = {"jax", "jaxlib", "optax", "grain", "orbax", "tokenizers", "lm_eval", "datasets", "tqdm",
                  "torch", "transformers", "accelerate", "lightning", "trainer", "evals"}
CORE = ("monitor", "app")
LAZY_EXTRA_IMPORTERS = ("app.commands", "app.demo")
# A trainer integration subclasses its framework's classes, so it imports its framework (its extra)
# as it loads; only a user's training script imports it, never the core.
INTEGRATIONS = {"monitor.integrations.transformers": {"transformers"},
                "monitor.integrations.lightning": {"lightning"},
                "monitor.integrations.accelerate": {"accelerate"}}


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


def function_level_lines(path: Path) -> set[int]:
    """Lines of the import statements that run only when a function is called."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.lineno for func in ast.walk(tree) if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(func) if isinstance(node, (ast.Import, ast.ImportFrom))}


def within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


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
    lazy = function_level_lines(path) if within(module, LAZY_EXTRA_IMPORTERS) else set()
    found = []
    own_framework = INTEGRATIONS.get(module, set())
    for line, target in imports_of(path, module):
        root = target.split(".")[0]
        if within(module, CORE) and root in EXTRA_PACKAGES and line not in lazy and root not in own_framework:
            found.append(f"{module}:{line} imports {target} (the core loads without the extras)")
        if within(target, tuple(INTEGRATIONS)) and module not in INTEGRATIONS:
            found.append(f"{module}:{line} imports {target} (only a user's script imports an integration)")
        if is_our_module(target):
            # A parent package import (`import monitor`) says nothing about the flow.
            if permitted is not None and target not in OURS and not allowed(target, permitted):
                found.append(f"{module}:{line} imports {target} ({package} may not)")
        elif package == "monitor.detectors":
            root = target.split(".")[0]
            if root and root not in sys.stdlib_module_names and root not in DETECTOR_THIRD_PARTY and root != "__future__":
                found.append(f"{module}:{line} imports {target} (detectors are pure)")
        if target.split(".")[0] in SQL_PACKAGES and not (module == STORE or module.startswith(STORE + ".")):
            found.append(f"{module}:{line} imports {target} (only {STORE} speaks SQL)")
    return found


def module_targets(path: Path, module: str, known: set[str]) -> set[str]:
    """Our modules this one imports. `from pkg import name` depends on pkg.name when that is a
    module and on pkg otherwise; the parent packages Python initialises on the way do not count
    (a package that re-exports its submodules would otherwise be a cycle with each of them)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out |= {f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names}
    return {t for t in out if t in known and t != module}


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the import graph, as the modules along it, or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return exc.args[1]
    return None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_follow_the_architecture(path):
    found = violations(path, module_name(path))
    assert not found, "\n".join(found)


def test_no_module_imports_itself_through_others():
    modules = {module_name(p): p for p in SOURCES}
    graph = {m: module_targets(p, m, set(modules)) for m, p in modules.items()}
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle_and_ignores_parent_packages(tmp_path):
    known = {"monitor.store", "monitor.store.store", "monitor.store.reader", "monitor.store.tables"}
    reader = tmp_path / "reader.py"
    reader.write_text("from typing import TYPE_CHECKING\nfrom monitor.store import tables\n"
                      "if TYPE_CHECKING:\n    from monitor.store.store import Store\n")
    store = tmp_path / "store.py"
    store.write_text("from monitor.store import reader, tables\n")
    init = tmp_path / "__init__.py"
    init.write_text("from monitor.store.store import Store\n")
    graph = {
        "monitor.store.reader": module_targets(reader, "monitor.store.reader", known),
        "monitor.store.store": module_targets(store, "monitor.store.store", known),
        "monitor.store": module_targets(init, "monitor.store", known),
        "monitor.store.tables": set(),
    }
    assert graph["monitor.store.store"] == {"monitor.store.reader", "monitor.store.tables"}
    assert sorted(import_cycle(graph)[:-1]) == ["monitor.store.reader", "monitor.store.store"]
    reader.write_text("from monitor.store import tables\n")
    graph["monitor.store.reader"] = module_targets(reader, "monitor.store.reader", known)
    assert import_cycle(graph) is None


def test_only_the_store_speaks_sql(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from sqlalchemy.exc import DBAPIError\n\ndef f():\n    import psycopg\n")
    assert violations(probe, "monitor.watch.probe") == [
        "monitor.watch.probe:1 imports sqlalchemy.exc (only monitor.store speaks SQL)",
        "monitor.watch.probe:4 imports psycopg (only monitor.store speaks SQL)",
    ]
    assert any("only monitor.store speaks SQL" in v for v in violations(probe, "app.dashboard.probe"))
    assert violations(probe, "monitor.store.probe") == []


def test_the_checker_catches_violations(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sqlalchemy\nfrom monitor.store import open_store\nfrom ..store import tables\n")
    found = violations(probe, "monitor.detectors.probe")
    assert any("sqlalchemy (detectors are pure)" in v for v in found)
    assert any("imports monitor.store " in v for v in found)
    assert any("imports monitor.store.tables" in v for v in found)
    assert violations(probe, "monitor.importers.probe") == [
        "monitor.importers.probe:1 imports sqlalchemy (only monitor.store speaks SQL)"]
    probe.write_text("def f():\n    import trainer.model\n")
    assert violations(probe, "evals.probe") == ["evals.probe:2 imports trainer.model (evals may not)"]


def test_the_core_loads_without_the_extras(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import jax\n\ndef f():\n    import trainer.loop\n    import torch\n")
    extras = "(the core loads without the extras)"
    assert violations(probe, "app.report.probe") == [
        f"app.report.probe:1 imports jax {extras}", f"app.report.probe:4 imports trainer.loop {extras}",
        f"app.report.probe:5 imports torch {extras}"]
    # A command may import them lazily, never as it loads.
    assert violations(probe, "app.commands.probe") == [f"app.commands.probe:1 imports jax {extras}"]
    probe.write_text("import transformers\nimport lightning\n")
    assert violations(probe, "monitor.integrations.transformers") == [
        f"monitor.integrations.transformers:2 imports lightning {extras}"]
    probe.write_text("import monitor.integrations.transformers\n")
    assert violations(probe, "app.demo") == [
        "app.demo:1 imports monitor.integrations.transformers (only a user's script imports an integration)"]
    probe.write_text("def f():\n    import lm_eval\n")
    assert violations(probe, "monitor.watch.probe") == [f"monitor.watch.probe:2 imports lm_eval {extras}"]
    assert violations(probe, "evals.probe") == []
