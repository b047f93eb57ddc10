"""Generic JSON Lines and CSV metric logs."""

from __future__ import annotations

import json
import math

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load


def _jsonl(path, objs, partial=""):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs) + partial)
    return path


def _log(path, rows, columns):
    """rows as JSON Lines or, for a .csv path, as CSV with these columns (a missing value empty)."""
    if path.suffix == ".jsonl":
        return _jsonl(path, rows)
    path.write_text(",".join(columns) + "\n" + "".join(",".join(str(r.get(c, "")) for c in columns) + "\n"
                                                      for r in rows))
    return path


def test_wide_jsonl_with_nested_values_nan_and_text(tmp_path):
    path = _jsonl(tmp_path / "m.jsonl", [
        {"step": 0, "train": {"loss": 3.0, "grad_norm": 1.0}, "optim/lr": 1e-4, "note": "hi",
         "wall_time": 1.7e9},
        {"step": 1, "train": {"loss": float("nan"), "grad_norm": float("inf")}, "ok": True},
    ])
    assert detect_format(path) == "jsonl"
    run = load(path)
    data = run.to_run_data("j")
    assert data.series(schema.TRAIN_LOSS).loc[0] == 3.0 and math.isnan(
        data.series(schema.TRAIN_LOSS).loc[1])
    assert data.series(schema.TRAIN_GRAD_NORM).loc[1] == math.inf
    assert data.series("extra/ok").to_dict() == {1: 1.0}
    assert any("note (1)" in n for n in run.notes)
    assert run.scalars["wall_time"].iloc[0] == 1.7e9


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_a_wall_time_written_as_iso_8601_text(tmp_path, suffix):
    """lingua's `created_at` (and a `timestamp` of many loggers) is text; one without an offset is
    UTC, as `datetime.utcnow().isoformat()` writes it. Read a block at a time or line by line, the
    same seconds; before, the times were lost (and the CSV's counted as left-out text)."""
    import pandas as pd

    rows = [{"step": 1, "loss": 2.0, "created_at": "2026-12-01T00:00:05+00:00"},
            {"step": 2, "loss": 1.9, "created_at": "2026-12-01T00:00:10.5"},
            {"step": 3, "loss": 1.8, "created_at": "2026-12-01T02:00:10.5+02:00"}]
    path = tmp_path / f"m.{suffix}"
    if suffix == "parquet":
        pd.DataFrame(rows).to_parquet(path)
    else:
        _log(path, rows, ["step", "loss", "created_at"])
    run = load(path)
    start = 1_796_083_200  # 2026-12-01T00:00:00Z
    assert run.scalars["wall_time"].tolist() == [start + 5, start + 10.5, start + 10.5]
    assert not run.notes


def test_long_jsonl_and_restart(tmp_path):
    path = _jsonl(tmp_path / "long.jsonl", [
        {"step": 5, "key": "train/loss", "value": 2.0},
        {"step": 6, "key": "train/loss", "value": 1.9},
        {"step": 5, "key": "train/loss", "value": 2.1},  # resumed from step 5
        {"step": 6, "key": "train/loss", "value": 1.8},
    ], partial='{"step": 7, "key": "train/lo')
    run = load(path)
    assert run.attempts == 2 and run.events[0]["kind"] == "restart"
    assert run.to_run_data("l").series(schema.TRAIN_LOSS).to_dict() == {5: 2.1, 6: 1.8}
    assert any("still being written" in n for n in run.notes)


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_lower_step_is_a_restart_only_where_a_series_goes_back(tmp_path, suffix):
    # An offline eval job appends the held-out loss of step 100 after training reached 300: a lower
    # step than the line before, but held-out loss does not go back on itself. Then the trainer
    # resumes from step 200 and logs train loss again: that series went back, a restart.
    rows = ([{"step": s, "loss": 3.0 - s / 1000} for s in range(100, 301, 100)] + [{"step": 100, "val_loss": 3.2}]
            + [{"step": s, "loss": 2.5 - s / 1000} for s in (200, 300)] + [{"step": 300, "val_loss": 3.0}])
    run = load(_log(tmp_path / f"m.{suffix}", rows, ["step", "loss", "val_loss"]))
    (restart,) = [e for e in run.events if e["kind"] == "restart"]
    assert run.attempts == 2 and restart["step"] == 200
    assert restart["payload"]["reason"] == "loss went back from step 300 to 200"
    data = run.to_run_data("m")
    assert data.series(schema.TRAIN_LOSS).to_dict() == pytest.approx({100: 2.9, 200: 2.3, 300: 2.2})
    assert data.series(schema.heldout_key("val")).to_dict() == pytest.approx({100: 3.2, 300: 3.0})


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_restart_takes_in_its_whole_line(tmp_path, suffix):
    # The resumed trainer's first line logs a new series before the train loss that goes back: the
    # whole line is the new attempt, so that series going back later is a restart again.
    rows = [{"step": 100, "loss": 3.0}, {"step": 300, "loss": 2.8}, {"step": 200, "grad": 5.0, "loss": 2.9},
            {"step": 150, "grad": 6.0}]
    run = load(_log(tmp_path / f"r.{suffix}", rows, ["step", "grad", "loss"]))
    assert [e["payload"]["reason"] for e in run.events if e["kind"] == "restart"] == [
        "loss went back from step 300 to 200", "grad went back from step 200 to 150"]
    assert run.scalars.set_index(["key", "step"])["attempt"].to_dict() == {
        ("train/loss", 100): 1, ("train/loss", 300): 1, ("extra/grad", 200): 2, ("train/loss", 200): 2,
        ("extra/grad", 150): 3}


@pytest.mark.parametrize("lines, message", [
    (['{"step": 1, "loss": 2.0}', '{"step": 2, "loss": '], "line 2: not valid JSON"),
    (['{"loss": 2.0}'], "line 1: no step field"),
    (['{"step": 1.5, "loss": 2.0}'], "line 1: step 1.5 is not a whole number"),
    (['[1, 2]'], "line 1: expected a JSON object"),
])
def test_bad_jsonl_lines(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(GapwatchError, match=message):
        load(path)


def test_generic_csv_wide_and_long(tmp_path):
    wide = tmp_path / "wide.csv"
    wide.write_text("iteration,loss,lr\n0,3.0,0.1\n1,2.5,\n2,NaN,0.1\n")
    assert detect_format(wide) == "csv"
    data = load(wide).to_run_data("w")
    assert data.series(schema.TRAIN_LOSS).index.tolist() == [0, 1, 2]
    assert data.series(schema.OPTIM_LR).index.tolist() == [0, 2]
    long = tmp_path / "long.csv"
    long.write_text("step,metric,value\n0,train/loss,3\n1,train/loss,2\n")
    assert load(long).to_run_data("l").series(schema.TRAIN_LOSS).to_dict() == {0: 3.0, 1: 2.0}
    bad = tmp_path / "bad.csv"
    bad.write_text("step,loss\n0,3.0\n1,abc\n")
    with pytest.raises(GapwatchError, match=r"line 3: column 'loss': 'abc' is not a number"):
        load(bad)


@pytest.mark.parametrize("reader", ["pyarrow", "pandas"])
def test_the_unnamed_index_column_pandas_writes_is_left_out_and_said(tmp_path, monkeypatch, sqlite_url, reader):
    import pandas as pd

    from monitor.importers import import_source, table_stream
    from monitor.store import open_store

    if reader == "pandas":
        monkeypatch.setattr(table_stream, "_arrow_reads", lambda path, header: False)
    path = tmp_path / "log.csv"
    pd.DataFrame({"step": [10, 20, 30], "loss": [3.0, 2.5, 2.0]}).to_csv(path)  # index: 0, 1, 2
    assert path.read_text().startswith(",step,loss\n")
    run = load(path)
    assert [row["source"] for row in run.mapping if row["source"] != "step"] == ["loss"]
    assert run.to_run_data("p").series(schema.TRAIN_LOSS).to_dict() == {10: 3.0, 20: 2.5, 30: 2.0}
    with open_store(sqlite_url) as store:
        _, summary = import_source(store, "p", path)
    assert summary.keys == [schema.TRAIN_LOSS]
    assert summary.notes == [f"{path}: column 1 has no name (as the index pandas' to_csv writes): left out"]


def test_profile_step_key(tmp_path):
    path = _jsonl(tmp_path / "n.jsonl", [
        {"iter": 10, "train/loss": 3.0, "val/loss": 3.1, "lr": 1e-3, "mfu": 35.0},
        {"iter": 20, "train/loss": 2.9, "val/loss": 3.0, "lr": 1e-3, "mfu": 36.0},
    ])
    data = load(path, profile="nanogpt").to_run_data("n")
    assert data.series(schema.heldout_key("val")).to_dict() == {10: 3.1, 20: 3.0}
    assert data.series(schema.PERF_MFU).loc[20] == pytest.approx(0.36)


def test_tab_separated(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text("step\ttrain/loss\n0\t3.0\n1\t2.5\n")
    assert load(path).to_run_data("t").series(schema.TRAIN_LOSS).to_dict() == {0: 3.0, 1: 2.5}
