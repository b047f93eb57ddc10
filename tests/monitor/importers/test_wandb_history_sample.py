"""W&B history saved from `run.history()` (500 rows drawn from the run's, at times out of step
order) is said to be a sample, or refused where it goes back, in every form people save it (CSV
with pandas' index, JSON Lines, Parquet), streamed or read whole; complete histories, the real OLMo
exports among them, are not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import import_source, load
from monitor.importers.wandb.history_sample import HistorySample
from monitor.store import open_store

from .test_parser_properties import SETTINGS

RUN_ROWS = 5_000


def _history(steps: np.ndarray) -> pd.DataFrame:
    """Rows as `run.history()` returns them: W&B's `_step`, the trainer's step, its values."""
    return pd.DataFrame({"_step": steps, "train/global_step": 10 * steps + 10,
                         "train/loss": 3.0 + 100.0 / (steps + 10.0), "_runtime": steps * 0.5})


def _drawn(out_of_order: bool) -> pd.DataFrame:
    """500 of a 5,000-row history, drawn at random, sorted; with `out_of_order`, the last row is
    one from earlier in the run, as wandb/wandb issue 5994 shows."""
    steps = np.sort(np.random.default_rng(7).choice(RUN_ROWS, 500, replace=False))
    if out_of_order:
        steps[-1] = steps[-40] - 1
    return _history(steps)


def _save(frame: pd.DataFrame, path) -> None:
    if path.suffix == ".csv":
        frame.to_csv(path)  # with its index, as people save it
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path)


def _sample_notes(notes) -> list[str]:
    return [n for n in notes if "looks like a sample" in n]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_drawn_history_is_said_to_be_a_sample_streamed_and_whole(tmp_path, sqlite_url, suffix):
    path = tmp_path / f"history{suffix}"
    frame = _drawn(out_of_order=False)
    _save(frame, path)
    whole = load(path)
    with open_store(sqlite_url) as store:
        _, summary = import_source(store, "sampled", path)
        loss = store.load_run("sampled").series(schema.TRAIN_LOSS).dropna()
    for notes in (whole.notes, summary.notes):
        (note,) = _sample_notes(notes)
        assert "500 rows" in note and "run.scan_history()" in note
    # True values at the trainer's true steps: kept, only few of them.
    assert loss.index.tolist() == frame["train/global_step"].tolist()
    assert loss.tolist() == pytest.approx(frame["train/loss"].tolist())


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_drawn_history_out_of_step_order_is_refused_naming_the_sample(tmp_path, sqlite_url, suffix):
    path = tmp_path / f"history{suffix}"
    _save(_drawn(out_of_order=True), path)
    with pytest.raises(GapwatchError, match=r"run\.history\(\).*run\.scan_history\(\)"):
        load(path)
    with open_store(sqlite_url) as store, pytest.raises(GapwatchError, match=r"run\.scan_history\(\)"):
        import_source(store, "sampled", path)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_complete_histories_are_not_called_samples(tmp_path, suffix):
    every_row = _history(np.arange(RUN_ROWS))
    # Logged with wandb.log(step=...) every 10 steps, evaluations at steps off that cadence.
    train = np.arange(10, 5_001, 10)
    cadence = pd.concat([_history(train), pd.DataFrame({"_step": np.arange(255, 5_000, 500),
                                                        "eval/loss": 3.2})]).sort_values("_step")
    for name, frame in (("every-row", every_row), ("cadence", cadence)):
        path = tmp_path / f"{name}{suffix}"
        _save(frame, path)
        assert not _sample_notes(load(path).notes), name


def test_the_real_olmo_exports_are_not_called_samples(shared_data):
    exports = sorted((shared_data / "runs/olmo-wandb-exports").rglob("*.csv"))
    histories = [p for p in exports if "_step" in pd.read_csv(p, nrows=0).columns]
    assert len(histories) >= 10
    for path in histories:
        assert not _sample_notes(load(path).notes), path.name


@SETTINGS
@given(cuts=st.lists(st.integers(0, 500), max_size=6), out_of_order=st.booleans())
def test_rows_seen_in_parts_say_what_they_say_whole(cuts, out_of_order):
    steps = _drawn(out_of_order)["_step"].to_numpy()

    def seen(parts) -> str:
        history = HistorySample("h")
        try:
            for part in parts:
                history.add(np.repeat(part, 3))  # a row's values repeat its step
        except GapwatchError as exc:
            return str(exc)
        return history.note()

    bounds = [0, *sorted(cuts), len(steps)]
    whole = seen([steps])
    assert seen([steps[lo:hi] for lo, hi in zip(bounds, bounds[1:])]) == whole
    assert ("goes back" in whole or "only grow" in whole) == out_of_order
    assert "looks like a sample" in whole or out_of_order
