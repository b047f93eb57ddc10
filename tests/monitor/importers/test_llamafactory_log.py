"""LLaMA-Factory's `trainer_log.jsonl`, written as its LogCallback writes it (a `json.dumps` of the
Trainer's latest log a line, at `current_steps`, the Trainer's global step): read on that step with
the `llamafactory` profile, though no field is called a step. Before, it was refused ("no step
field") with a hint to take `epoch` for the step."""

from __future__ import annotations

import json

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, import_source, load
from monitor.store import open_store


def _write(path, *, current: bool, steps=range(10, 157, 10)) -> None:
    """A DPO run of 156 steps logging every 10 and evaluating every 50 (as the DPO run in the wild
    folder). `current`: as LogCallback writes now (`lr`, empty values left out, token counts); else
    as it wrote in 2024 (`learning_rate`, empty values written as null)."""
    lines = []
    for step in [*steps, 156]:
        logs = {"current_steps": step, "total_steps": 156, "loss": round(0.69 - step / 1000, 4),
                "eval_loss": None, "predict_loss": None, "reward": round(step / 500, 4),
                "lr" if current else "learning_rate": 4.9e-06, "epoch": round(step / 156, 2),
                "percentage": round(100 * step / 156, 2), "elapsed_time": "0:00:40", "remaining_time": "0:10:02"}
        if current:
            logs.update(throughput=round(2048 * step / 40, 2), total_tokens=2048 * step)
        lines.append(logs)
        if step % 50 == 0:
            lines.append({**logs, "loss": None, "reward": None, "eval_loss": round(0.7 - step / 2000, 4)})
    with open(path, "w", encoding="utf-8") as fh:
        for logs in lines:
            fh.write(json.dumps({k: v for k, v in logs.items() if v} if current else logs) + "\n")


@pytest.mark.parametrize("current", [True, False], ids=["lr, values left out", "learning_rate, nulls"])
def test_the_log_lands_on_current_steps_with_its_meaning(tmp_path, sqlite_url, current):
    path = tmp_path / "trainer_log.jsonl"
    _write(path, current=current)
    assert detect_format(path) == "jsonl"
    run = load(path)
    assert run.profile == "llamafactory"
    data = run.to_run_data("lf")
    assert list(data.series(schema.TRAIN_LOSS).dropna().index) == [*range(10, 151, 10), 156]
    assert list(data.series(schema.heldout_key("eval")).dropna().index) == [50, 100, 150]
    assert data.series(schema.OPTIM_LR).dropna().iloc[0] == pytest.approx(4.9e-06)
    # The schedule's length, the share done and the clock as text are no series.
    assert not {"total_steps", "percentage", "elapsed_time", "remaining_time"} & set(run.key_map)
    if current:
        assert data.series(schema.TRAIN_TOKENS).dropna().iloc[-1] == 2048 * 156
        assert run.key_map["throughput"] != schema.PERF_TOKENS_PER_S  # a mean since the start
    with open_store(sqlite_url) as store:
        result, summary = import_source(store, "lf", path)  # streamed: the same steps
        assert summary.profile == "llamafactory"
        stored = store.load_run("lf").series(schema.TRAIN_LOSS).dropna()
        assert list(stored.index) == [*range(10, 151, 10), 156]


def test_a_log_with_neither_step_field_is_still_refused_in_one_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"loss": 0.6, "epoch": 0.1}) + "\n")
    with pytest.raises(GapwatchError, match="no step field"):
        load(path)
