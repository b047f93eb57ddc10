"""W&B history exports (`_step` and a column per metric) imported chunk by chunk store the same run
as reading the whole file (`load`), on the real OLMo exports and on an export with every shape of
cell, a trainer step column, a rewind and a text column, cut into many small blocks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import import_source, is_streamed_export, load
from monitor.importers.store_writer import write_run
from monitor.importers.wandb import csv_stream
from monitor.store import open_store


@pytest.fixture(autouse=True)
def _streaming_on(monkeypatch):
    """The streamed reader is off in gapwatch import until it checks cells as text; these tests
    hold it to the whole-file reader's results where it is exact."""
    monkeypatch.setattr("monitor.importers.STREAM_WANDB_EXPORTS", True)


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
    lines = ['_step,train/global_step,train/loss,eval/loss,flags/best,samples,_timestamp,_runtime']
    trainer = 0
    for row in range(rows):
        if row == 300:
            trainer = 150  # a rewind to a checkpoint
        if row % 7 == 6:  # an evaluation row of its own, without the trainer's step
            lines.append(f'{row},,,{3.0 - row / 1000}, ,"{{""_type"": ""table""}}",'
                         f'{1.7e9 + row},{row}')
            continue
        trainer += 10
        loss = {5: "NaN", 11: "inf", 13: "-Infinity"}.get(row, f" {4.0 - row / 1000}")
        best = "true" if row % 5 == 0 else "false"
        lines.append(f"{row},{trainer},{loss},,{best},,{1.7e9 + row},{row}")
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
    assert whole.attempts == 2
    assert any("rewind" in n for n in summary.notes)
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
