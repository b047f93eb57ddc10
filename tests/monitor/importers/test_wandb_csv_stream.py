"""W&B history exports (`_step` and a column per metric) imported chunk by chunk store the same run
as reading the whole file (`load`), on the real OLMo exports and on an export with every shape of
cell, a trainer step column, a rewind and a text column, cut into many small blocks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import import_source, is_streamed_export, load
from monitor.importers.store_writer import write_run
from monitor.importers.wandb import csv_stream
from monitor.store import open_store

from .test_parser_properties import SETTINGS, csv_cell, logs, same


def _same_run(store, path, name):
    streamed, summary = import_source(store, f"{name}-streamed", path)
    whole = load(path)
    write_run(store, f"{name}-whole", whole)
    assert streamed.rows_total == len(whole.scalars)
    pd.testing.assert_frame_equal(store.load_run(f"{name}-streamed").scalars,
                                  store.load_run(f"{name}-whole").scalars)
    assert summary.profile == whole.profile
    return summary, whole


def test_real_history_exports_stream_to_the_same_run(shared_data, sqlite_url):
    store = open_store(sqlite_url)
    try:
        for name in ("ladder/peteish-moreeval__190M-1xC.csv", "peteish1/peteish1.csv"):
            path = shared_data / "runs/olmo-wandb-exports" / name
            assert is_streamed_export("wandb-csv", path)
            _same_run(store, path, name.split("/")[0])
    finally:
        store.close()


def _export(path, rows=400):
    lines = ['_step,train/global_step,train/loss,eval/loss,flags/best,samples,_timestamp,_runtime,val/batch_acc']
    trainer = 0
    for row in range(rows):
        if row == 300:
            trainer = 150  # a rewind to a checkpoint
        if row == 100:  # a validation metric per batch, at Lightning's count of batches
            lines.append(f"{row},0,,,,,{1.7e9 + row},{row},{2.5}")
            continue
        if row % 7 == 6:  # an evaluation row of its own, without the trainer's step
            lines.append(f'{row},,,{3.0 - row / 1000}, ,"{{""_type"": ""table""}}",'
                         f'{1.7e9 + row},{row},')
            continue
        trainer += 10
        loss = {5: "NaN", 11: "inf", 13: "-Infinity"}.get(row, f" {4.0 - row / 1000}")
        best = "true" if row % 5 == 0 else "false"
        lines.append(f"{row},{trainer},{loss},,{best},,{1.7e9 + row},{row},")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_cell_shape_rewind_and_trainer_step_across_small_blocks(tmp_path, sqlite_url,
                                                                      monkeypatch):
    monkeypatch.setattr(csv_stream, "BLOCK_BYTES", 1 << 10)  # a few dozen rows a block
    monkeypatch.setattr(csv_stream, "CHUNK_ROWS", 97)
    path = _export(tmp_path / "history.csv")
    store = open_store(sqlite_url)
    try:
        summary, whole = _same_run(store, path, "shapes")
        data = store.load_run("shapes-streamed")
    finally:
        store.close()
    assert whole.attempts == 2  # the rewind; the validation batches' low steps are no rewind
    assert any("1 rewind(s)" in n for n in summary.notes)
    assert any("'samples' holds text" in n for n in summary.notes)
    loss = data.series(schema.TRAIN_LOSS)
    assert math.isnan(loss.loc[60]) and np.isinf(loss.loc[110])
    held = data.series(schema.heldout_key("eval")).dropna()
    assert held.index[0] == 60 and held.iloc[0] == pytest.approx(3.0 - 6 / 1000)


def test_text_after_numbers_is_an_error_naming_the_line(tmp_path, sqlite_url, monkeypatch):
    monkeypatch.setattr(csv_stream, "BLOCK_BYTES", 1 << 10)
    path = tmp_path / "bad.csv"
    path.write_text("_step,train/loss\n" + "".join(f"{s},{s}.5\n" for s in range(200))
                    + "200,oops\n")
    store = open_store(sqlite_url)
    try:
        with pytest.raises(GapwatchError, match=r"line 202: column 'train/loss': 'oops' is not"):
            import_source(store, "bad", path)
    finally:
        store.close()


def _stream_rows(path) -> dict[tuple[int, str], float]:
    frames = list(csv_stream.WandbCsvStream(path).chunks())
    return {(int(s), str(k)): float(v) for f in frames
            for s, k, v in zip(f["step"], f["key"], f["value"])}


@pytest.mark.parametrize("rows, message", [
    ("1,1.5\n2,1e309\n", "line 3: column 'train/loss': the number '1e309' does not fit a 64-bit float"),
    ("1,1.5\n2," + "9" * 400 + "\n", "line 3: column 'train/loss': the number '" + "9" * 79),
    ("9007199254740993.5,1.5\n", "line 2: step 9007199254740993.5 is not a whole number"),
    ("1e400,1.5\n", "line 2: column '_step': the number '1e400' does not fit a 64-bit float"),
    ("18446744073709551616,1.5\n", "line 2: step 18446744073709551616 is outside the steps a store keeps"),
    ("-1,1.5\n", "line 2: step -1 is outside the steps a store keeps"),
    ("1.5,1.5\n", "line 2: step 1.5 is not a whole number"),
    ("1,1.5\n,2.5\n", "line 3: no step in column '_step'"),
])
def test_numbers_a_double_would_change_are_refused_in_one_line(tmp_path, rows, message):
    path = tmp_path / "export.csv"
    path.write_text("_step,train/loss\n" + rows)
    with pytest.raises(GapwatchError) as err:
        _stream_rows(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_steps_beyond_2_53_are_kept_exactly_as_row_steps_and_trainer_steps(tmp_path):
    big = 2**53 + 1
    path = tmp_path / "export.csv"
    path.write_text(f"_step,train/loss,eval/loss\n{big},1.0,\n{big + 2},inf,\n{big + 4}, ,2.5\n"
                    f"{2**62 + 1},-Infinity,\n")
    assert _stream_rows(path) == {(big, "train/loss"): 1.0, (big + 2, "train/loss"): math.inf,
                                  (big + 4, "eval/loss"): 2.5,
                                  (2**62 + 1, "train/loss"): -math.inf}
    trainer = tmp_path / "trainer.csv"
    trainer.write_text(f"_step,train/global_step,train/loss\n0,{big},1.0\n1,,2.0\n"
                       f"2,{big + 2}.0,3.0\n3,1.8e16,4.0\n")
    assert _stream_rows(trainer) == {(big, "train/loss"): 2.0, (big + 2, "train/loss"): 3.0,
                                     (18 * 10**15, "train/loss"): 4.0}


@SETTINGS
@given(rows=logs())
def test_a_streamed_export_is_read_back_exactly(tmp_path, rows):
    names = sorted({k for _, v in rows for k in v})
    path = tmp_path / "export.csv"
    path.write_text("_step," + ",".join(names) + "\n" + "".join(
        f"{s}," + ",".join(csv_cell(v[n]) if n in v else "" for n in names) + "\n" for s, v in rows))
    assert same(_stream_rows(path), {(s, k): v for s, vals in rows for k, v in vals.items()})


def test_history_saved_with_its_pandas_index_leaves_the_index_out(tmp_path, sqlite_url):
    """`run.history().to_csv(path)` writes pandas' index first, under no name: a row counter, not a
    series, whether the file is streamed or read whole. LitGPT's history (loggers numbering by
    micro-batch, its optimizer step logged as `step`) lands on `step`, not on Lightning's
    `trainer/global_step`."""
    hf = pd.DataFrame({"_step": range(6), "train/global_step": [10, 20, 30, 40, 50, 50],
                       "train/loss": [3.0, 2.9, 2.8, 2.7, 2.6, np.nan],
                       "eval/loss": [np.nan] * 5 + [3.1], "_runtime": np.arange(6.0)})
    litgpt = pd.DataFrame({"_step": range(4), "trainer/global_step": [3, 7, 11, 15],
                           "step": [1, 2, 3, 4], "iter": [4, 8, 12, 16], "iter_time": [0.1] * 4,
                           "loss": [9.0, 8.0, 7.0, 6.0]})
    store = open_store(sqlite_url)
    try:
        for name, frame, steps in (("hf", hf, [10, 20, 30, 40, 50]), ("litgpt", litgpt, [1, 2, 3, 4])):
            path = tmp_path / f"{name}.csv"
            frame.to_csv(path)  # with its index, as people save it
            summary, whole = _same_run(store, path, name)
            assert not [k for k in whole.key_map.values() if "unnamed" in k]
            for notes in (summary.notes, whole.notes):
                assert any("column 1 has no name" in n for n in notes)
            loss = whole.scalars.loc[whole.scalars["key"] == schema.TRAIN_LOSS, "step"].tolist()
            assert loss == steps
    finally:
        store.close()
