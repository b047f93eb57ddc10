"""docs/architecture.md is the map: every path it names exists, and every package of monitor/ and
app/ and every module at monitor/'s top is on it."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
ROOTS = ("monitor/", "app/", "evals/", "trainer/", "tests/", "bench/", "docs/")
# The walk-throughs' files a newcomer makes: named in the docs, not in the tree.
EXAMPLES = {"monitor/detectors/my_check.py", "monitor/importers/my_format.py"}


def named_paths(text: str) -> set[str]:
    quoted = re.findall(r"`([^`\s]+)`", text)
    return {q.rstrip(",.") for q in quoted if q.startswith(ROOTS)}


def test_every_path_the_map_names_exists():
    missing = sorted(p for p in named_paths(DOC.read_text()) - EXAMPLES if not (REPO / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_package_and_loose_module_is_on_the_map():
    text = DOC.read_text()
    wanted = [f"{p.parent.relative_to(REPO)}/" for root in ("monitor", "app")
              for p in (REPO / root).glob("*/__init__.py")]
    wanted += [str(p.relative_to(REPO)) for p in (REPO / "monitor").glob("*.py") if p.name != "__init__.py"]
    absent = sorted(w for w in wanted if w not in text)
    assert not absent, f"docs/architecture.md does not name: {absent}"
