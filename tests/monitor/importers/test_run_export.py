"""`gapwatch export` and `history()`: a stored run out as CSV, JSON Lines and Parquet, and importing
the export gives back the same run, on every real file of the shared wild/ folder and on runs the
wandb SDK wrote (NaN and infinities, a resumed run's attempts)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from monitor.errors import GapwatchError
from monitor.importers import detect_format, import_source
from monitor.importers.run_export import export_run, history
from monitor.schema import MAX_STEP
from monitor.store import open_store

from .conftest import run_writer


def _wild_sources(shared_data):
    wild = shared_data / "wild"
    sources = [(p.parent.parent.name, p, {}) for p in sorted(wild.glob("wandb/*/wandb/run-*"))]
    sources.append(("tb", next(wild.glob("tensorboard/*/lightning_logs/version_0")), {}))
    sources.append(("lm_eval", next(wild.glob("lm_eval/*/results/*")), {"step": 1000}))
    export = next(wild.glob("wandb_csv/*/wandb_export.csv"))
    sources.append(("panel", export, {"source_run": "gpt2"}))
    return sources


def _rows(store, name) -> pd.DataFrame:
    """Every stored row of a run, every attempt, in one frame ordered for comparison."""
    parts = []
    for key in sorted(store.list_keys(name)):
        rows = store.read_attempt_rows(name, [key], 0, MAX_STEP).get(key)
        if rows is not None:
            parts.append(pd.DataFrame({"key": key, "step": rows.steps, "attempt": rows.attempts,
                                       "value": rows.values}))
    return pd.concat(parts, ignore_index=True).sort_values(["key", "step", "attempt"],
                                                           ignore_index=True)


FORMATS = ("csv", "jsonl", "parquet")


def _round_trip(store, name, tmp_path, formats=FORMATS):
    before = _rows(store, name)
    assert len(before)
    for ext in formats:
        path = tmp_path / f"{name}.{ext}"
        assert export_run(store, name, path) == len(before)
        assert detect_format(path) == "gapwatch-export"
        import_source(store, f"{name}-{ext}", path)
        pd.testing.assert_frame_equal(_rows(store, f"{name}-{ext}"), before)
    return before


def test_every_wild_file_round_trips(shared_data, sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    try:
        # Each file through one format, in turn: every format meets several trainers' files.
        for i, (name, source, kwargs) in enumerate(_wild_sources(shared_data)):
            import_source(store, name, source, **kwargs)
            _round_trip(store, name, tmp_path, [FORMATS[i % len(FORMATS)]])
            # history(): the latest value of each key at each step, as the detectors see it.
            wide = history(name, store=store)
            want = store.load_run(name).scalars
            # a rarely logged series of a long run loads sparse (schema.keep_sparse): same values
            pd.testing.assert_frame_equal(wide[sorted(wide.columns)], want[sorted(want.columns)],
                                          check_names=False, check_freq=False, check_dtype=False)
    finally:
        store.close()


def test_non_finite_values_and_attempts_round_trip(rich_run, tmp_path_factory, sqlite_url,
                                                   tmp_path):
    root = tmp_path_factory.mktemp("wandb_export_resumed")
    for first, last in ((0, 20), (10, 25)):  # the second process resumes from step 10
        run_writer(root, "segment", "exportres", True, str(first), str(last))
    store = open_store(sqlite_url)
    try:
        import_source(store, "rich", rich_run)
        rich = _round_trip(store, "rich", tmp_path)
        assert np.isnan(rich["value"]).any() and np.isinf(rich["value"]).any()
        import_source(store, "resumed", root / "wandb")
        resumed = _round_trip(store, "resumed", tmp_path)
        assert set(resumed["attempt"]) == {1, 2}
    finally:
        store.close()


def test_export_command_keys_glob_and_history(shared_data, sqlite_url, tmp_path, capsys):
    (folder,) = (shared_data / "wild/wandb/11_cs336_custom_2025/wandb").glob("run-*")
    assert main(["import", str(folder), "--run", "cs336", "--store", sqlite_url]) == 0
    out = tmp_path / "held.parquet"
    assert main(["export", "--run", "cs336", "--keys", "eval/heldout/*", "-o", str(out),
                 "--store", sqlite_url]) == 0
    assert "wrote 2,441 rows of run 'cs336'" in capsys.readouterr().err
    assert set(pd.read_parquet(out)["key"]) == {"eval/heldout/val/loss"}
    wide = history("cs336", ["train/*", "optim/lr"], store=sqlite_url)
    assert list(wide.columns) == ["optim/lr", "train/loss"]
    assert wide.index.name == "step" and wide.index[-1] == 4881
    assert wide["train/loss"].iloc[-1] == pytest.approx(1.9583988189697266)
    assert main(["export", "--run", "cs336", "--keys", "nope/*", "-o", str(out),
                 "--store", sqlite_url]) == 2
    assert "no key matches nope/*" in capsys.readouterr().err
    with pytest.raises(GapwatchError, match="write .csv, .jsonl or .parquet"):
        history_path = tmp_path / "h.txt"
        export_run(open_store(sqlite_url), "cs336", history_path)
