"""ms-swift's `logging.jsonl`, appended at each log of a real Hugging Face Trainer run as ms-swift's
callback appends it (hf_trainer_console.py): read on the step its `global_step/max_steps` text
gives ("20/60"), with the `swift` profile. Before, it was refused: "no step field"."""

from __future__ import annotations

import json

import pytest

from monitor import schema
from monitor.importers import detect_format, import_source, load
from monitor.importers.hf_trainer_state import source_name
from monitor.store import open_store


@pytest.fixture(scope="module")
def swift_log(trainer_console):
    log, logged = trainer_console
    return log.parent / "logging.jsonl", logged


def test_each_log_lands_on_its_step_with_its_meaning(swift_log, sqlite_url):
    path, logged = swift_log
    assert detect_format(path) == "jsonl"
    run = load(path)
    assert run.profile == "swift"
    data = run.to_run_data("s")
    truth = {(e["step"], source_name(k)): float(v) for e in logged for k, v in e["logs"].items()
             if isinstance(v, (int, float))}
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(5, 61, 5))
    assert all(v == pytest.approx(truth[(s, "train/loss")], abs=1e-8) for s, v in loss.items())
    held = data.series(schema.heldout_key("eval")).dropna()
    assert list(held.index) == [20, 40, 60]
    assert held.loc[40] == pytest.approx(truth[(40, "eval/loss")], abs=1e-8)
    assert data.series(schema.OPTIM_LR).dropna().index[0] == 5
    # The run's totals and the clock as text are no series; the mean speed is no step rate.
    assert not {"train_runtime", "train_loss", "percentage", "elapsed_time"} & set(run.key_map)
    assert run.key_map["train_speed(iter/s)"] == "perf/mean_steps_per_s"
    with open_store(sqlite_url) as store:
        import_source(store, "swift", path)  # streamed: the same steps
        assert list(store.load_run("swift").series(schema.TRAIN_LOSS).dropna().index) == list(range(5, 61, 5))


def test_a_progress_is_a_step_only_where_it_reads_done_of_planned(tmp_path):
    path = tmp_path / "logging.jsonl"
    lines = [{"loss": 2.0, "train_speed(iter/s)": 0.3, "global_step/max_steps": f"{s}/100"} for s in (5, 10)]
    path.write_text("".join(json.dumps(o) + "\n" for o in lines)
                    + json.dumps({"loss": 1.9, "global_step/max_steps": "15/10"}) + "\n")
    with pytest.raises(Exception, match=r"line 3: step '15/10' is not a whole number"):
        load(path)
