"""No code outside monitor/detectors/ names a detector, by its name or by importing its module: the
report's verdict, its tables and the dashboard's panels read what each detector declares (story,
sections, verdict role, caveat, the pictures of its statistics it draws), so a new detector joins them from its own
module and one registry line.

Names that are also ordinary words of the product (`resume`, `throughput`, `spike`, `nonfinite`, which
are event kinds, panels and store columns as well) are left out: a string equal to them says nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

from monitor.detectors import REGISTRY

REPO = Path(__file__).resolve().parents[1]
SHARED_WORDS = {"resume", "throughput", "spike", "nonfinite", "memorization"}
SOURCES = ("app", "monitor", "evals", "trainer")


def test_no_detector_name_outside_the_detectors():
    names = set(REGISTRY) - SHARED_WORDS
    assert names, "every detector name is a shared word: this test checks nothing"
    modules = {cls.__module__ for cls in REGISTRY.values()}
    found = []
    for package in SOURCES:
        for path in (REPO / package).rglob("*.py"):
            if path.is_relative_to(REPO / "monitor" / "detectors"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
                imported = ([a.name for a in node.names] if isinstance(node, ast.Import)
                            else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                found += [f"{path.relative_to(REPO)}:{node.lineno}: imports {m}" for m in imported if m in modules]
    assert not found, "detector names outside monitor/detectors/:\n" + "\n".join(found)



def test_every_detector_says_in_words_what_it_judges():
    from monitor.detectors import judging
    from monitor.schema import NotJudged

    words = {name: judging(name) for name in REGISTRY}
    # "Not judged" lines begin with these words, so they must be words and tell the detectors apart.
    assert all(w != name and "_" not in w for name, w in words.items()), words
    assert len(set(words.values())) == len(words), words
    assert judging("retired_detector") == "retired_detector"  # an older store's detector keeps its name
    line = NotJudged("reference_divergence", "only 6 logged steps", "train/loss", "60 more logged steps")
    assert line.describe(judging(line.detector)) == ("train loss against the reference (train/loss): not judged, "
                                                     "only 6 logged steps (needs 60 more logged steps)")
