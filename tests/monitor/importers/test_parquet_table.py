"""Parquet metric tables (monitor/importers/parquet_table.py, read by table_stream.py): a W&B
run's history as pandas writes it with to_parquet, and a trainer's own table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, import_source, load
from monitor.store import open_store


def _wandb_history(path, steps=200) -> None:
    """What `wandb.Api().run(...).history(samples=...)` gives, saved with to_parquet: W&B's `_step`
    on every row; HF Trainer's train rows with `train/global_step`, an evaluation row every 50
    steps with its own `_step`, a media column of text, a nested dict as a struct."""
    rows = []
    for step in range(10, steps + 1, 10):
        rows.append({"train/loss": 3.0 - step / 1000, "train/global_step": step, "optim": {"lr": 1e-4},
                     "train/clipped": step % 20 == 0, "samples": f"media/table_{step}.json"})
        if step % 50 == 0:
            rows.append({"eval/loss": 3.2 - step / 1000, "optim": None})
    frame = pd.DataFrame(rows)
    frame.insert(0, "_step", np.arange(len(frame)))
    frame["_runtime"] = frame["_step"] * 2.0
    frame["_timestamp"] = 1.7e9 + frame["_runtime"]
    frame.to_parquet(path)


def test_a_wandb_history_saved_as_parquet_is_on_the_trainers_step(tmp_path):
    path = tmp_path / "history.parquet"
    _wandb_history(path)
    assert detect_format(path) == "parquet"
    run = load(path)
    data = run.to_run_data("h")
    # pandas writes its NaN as null: what was not logged at a row.
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(10, 201, 10))
    # An evaluation row has no train/global_step: it joins the training step logged before it.
    heldout = data.series(schema.heldout_key("eval")).dropna()
    assert heldout.to_dict() == {50: pytest.approx(3.15), 100: pytest.approx(3.1), 150: pytest.approx(3.05),
                                 200: pytest.approx(3.0)}
    assert data.series(schema.OPTIM_LR).dropna().iloc[0] == pytest.approx(1e-4)  # the struct's field
    assert data.series("train/clipped").dropna().loc[20] == 1.0
    assert any("left out values that are not numbers: samples (20)" in n for n in run.notes)


def test_a_parquet_table_imports_through_the_store_as_it_loads(tmp_path, sqlite_url):
    path = tmp_path / "history.parquet"
    _wandb_history(path)
    with open_store(sqlite_url) as store:
        _, summary = import_source(store, "h", path)
        stored = store.load_run("h")
    loaded = load(path).to_run_data("h")
    for key in (schema.TRAIN_LOSS, schema.heldout_key("eval"), schema.OPTIM_LR):
        assert stored.series(key).equals(loaded.series(key)), key
    assert any("samples (20)" in n for n in summary.notes)


def test_a_trainers_table_that_goes_back_is_a_restart(tmp_path):
    steps = list(range(1, 101)) + list(range(61, 121))
    loss = [4.0 - s / 100 + (0.5 if i >= 100 else 0) for i, s in enumerate(steps)]
    loss[110] = math.nan  # logged as NaN (a null would be "not logged")
    table = pa.table({"step": steps, "loss": loss})
    path = tmp_path / "metrics.parquet"
    pq.write_table(table, path, row_group_size=37)  # restart and row groups fall apart
    run = load(path)
    assert [(e["step"], e["kind"]) for e in run.events] == [(61, "restart")]
    loss = run.to_run_data("t").series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(1, 121)) and loss.loc[70] == pytest.approx(3.8)
    assert math.isnan(run.to_run_data("t").series(schema.TRAIN_LOSS).loc[71])


def test_bad_parquet_gets_one_clear_line(tmp_path):
    fake = tmp_path / "history.parquet"
    fake.write_text("step,loss\n1,2.0\n")
    with pytest.raises(GapwatchError, match="not a readable Parquet file"):
        load(fake)
    half = tmp_path / "half.parquet"
    pq.write_table(pa.table({"step": [1.0, 2.5], "loss": [3.0, 2.9]}), half)
    with pytest.raises(GapwatchError, match="line 2"):
        load(half)
