"""`gapwatch eval` on a real checkpoint into a real store, and `gapwatch evals fetch-data`."""

from __future__ import annotations

import json

import pytest

from monitor.schema import downstream_key, heldout_key


def test_eval_stores_results_at_the_checkpoint_step(runs, eval_data_dir, shared_data, tmp_path,
                                                    capsys):
    from app.cli import main
    from monitor.store import open_store

    store = f"sqlite:///{tmp_path / 'store.db'}"
    lambada = shared_data / "text/lambada/lambada_test.jsonl"
    code = main(["eval", "--run", "a", "--checkpoint", str(runs / "a/checkpoints/4"),
                 "--tasks", "arc_easy,boolq", "--limit", "6", "--data-dir", str(eval_data_dir),
                 "--heldout", f"lambada={lambada}", "--heldout-max-tokens", "3000",
                 "--store", store, "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["step"] == 4
    (heldout,) = printed["heldout"]
    expected = {heldout_key("lambada", "loss"): heldout["loss"],
                heldout_key("lambada", "n"): heldout["n"]}
    for d in printed["downstream"]:
        assert d["n"] == 6
        expected[downstream_key(d["task"], d["metric"])] = d["value"]
        expected[downstream_key(d["task"], d["metric"], "stderr")] = d["stderr"]
    assert {(d["task"], d["metric"]) for d in printed["downstream"]} == {
        ("arc_easy", "acc"), ("arc_easy", "acc_norm"), ("boolq", "acc")}
    with open_store(store) as s:
        frame = s.read_scalars(["a"], list(expected))
        events = s.read_events("a", kinds=["eval"])
    assert set(frame["step"]) == {4}
    assert dict(zip(frame["key"], frame["value"])) == pytest.approx(expected)
    assert sorted(p["eval"] for p in events["payload"]) == ["downstream", "heldout"]


def test_eval_rejects_bad_requests(runs, capsys):
    from app.cli import main

    ckpt = str(runs / "a/checkpoints/4")
    assert main(["eval", "--run", "a", "--checkpoint", ckpt, "--tasks", "squad"]) == 2
    assert "unknown task(s) squad" in capsys.readouterr().err
    assert main(["eval", "--run", "a", "--checkpoint", ckpt, "--heldout", "nonsense"]) == 2
    assert "use lambada, c4 or NAME=FILE" in capsys.readouterr().err


def test_fetch_data_command_converts_original_files(shared_data, tmp_path, capsys):
    from app.cli import main

    code = main(["evals", "fetch-data", "--original-dir", str(shared_data / "evals"),
                 "--data-dir", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "hellaswag/validation: 10042 rows" in out and "178 files" in out
    assert json.loads((tmp_path / "SOURCE.json").read_text())["files"] == 178
