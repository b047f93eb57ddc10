"""DVCLive's folder (monitor/importers/dvclive_folder.py), written line by line as DVCLive's
`Metric.dump` writes it: a tab-separated `timestamp`, `step` and the value under the name's last
part, appended to `plots/metrics/<name>.tsv`; `params.yaml` and `metrics.json` beside them."""

from __future__ import annotations

import csv
import json

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load

T0 = 1_700_000_000_000  # ms


def log_metric(folder, name: str, step: int, value: float, timestamp: int | None) -> None:
    path = folder / "plots" / "metrics" / f"{name}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    row = ({"timestamp": timestamp} if timestamp is not None else {}) | {"step": step, name.split("/")[-1]: value}
    existed = path.exists()
    with open(path, "a", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, row.keys(), delimiter="\t", lineterminator="\n")
        if not existed:
            writer.writeheader()
        writer.writerow(row)


def _job(folder, steps=range(0, 300), timestamps: bool = True, start_ms: int = T0) -> None:
    for i, step in enumerate(steps):
        at = start_ms + 1000 * i if timestamps else None
        log_metric(folder, "train/loss", step, 3 - step / 1000, at)
        if step % 50 == 0:
            log_metric(folder, "eval/loss", step, 3.1 - step / 1000, at)


def test_a_dvclive_folder_is_one_run_on_its_steps(tmp_path):
    live = tmp_path / "dvclive"
    _job(live)
    (live / "params.yaml").write_text("lr: 0.0006\nmodel:\n  layers: 12\n")
    (live / "metrics.json").write_text(json.dumps({"train": {"loss": 2.701}, "step": 299}))
    assert detect_format(tmp_path) == "dvclive"
    run = load(tmp_path)  # the project folder, or dvclive/ itself
    assert run.name_hint == tmp_path.name and run.config == {"lr": 0.0006, "model": {"layers": 12}}
    assert run.summary["step"] == 299 and not run.notes
    data = run.to_run_data("live")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(300))
    assert data.series("eval/heldout/eval/loss").to_dict() == {s: pytest.approx(3.1 - s / 1000) for s in range(0, 300, 50)}
    assert run.scalars["wall_time"].iloc[0] == pytest.approx(T0 / 1000)
    assert load(live).scalars.equals(run.scalars)


def test_a_job_resumed_from_an_earlier_step_is_a_restart(tmp_path):
    # Live(resume=True) appends: the second process trained on from its checkpoint at step 200,
    # after the first had logged up to 249.
    _job(tmp_path, range(0, 250))
    _job(tmp_path, range(200, 300), start_ms=T0 + 10_000_000)
    run = load(tmp_path)
    assert run.attempts == 2 and [e["step"] for e in run.events] == [200]
    loss = run.to_run_data("live").series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(300))


def test_without_timestamps_the_files_are_read_one_after_the_other(tmp_path):
    _job(tmp_path, timestamps=False)
    run = load(tmp_path)
    assert run.attempts == 1 and "wall_time" not in run.scalars
    assert len(run.to_run_data("live").series(schema.TRAIN_LOSS)) == 300


def test_the_hugging_face_trainers_folder_is_refused_with_the_reason(tmp_path):
    _job(tmp_path)
    (tmp_path / "params.yaml").write_text("per_device_train_batch_size: 8\nlogging_steps: 10\n"
                                          "gradient_accumulation_steps: 4\n")
    with pytest.raises(GapwatchError, match="numbers its rows by log call.*trainer_state.json"):
        load(tmp_path)


def test_a_bad_line_costs_only_itself(tmp_path):
    _job(tmp_path, range(0, 10))
    with open(tmp_path / "plots" / "metrics" / "train" / "loss.tsv", "a") as fh:
        fh.write(f"{T0 + 20_000}\t10\tnan-ish\n{T0 + 21_000}\t11\n{T0 + 22_000}\tx\t2.9\n")
    log_metric(tmp_path, "train/loss", 12, 2.5, T0 + 23_000)
    run = load(tmp_path)
    assert list(run.to_run_data("live").series(schema.TRAIN_LOSS).index) == [*range(10), 12]
    assert len(run.notes) == 3 and all("left out" in n for n in run.notes)
