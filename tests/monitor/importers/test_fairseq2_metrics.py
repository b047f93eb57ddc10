"""Meta's fairseq2: the `metrics/` folder of a job's output directory, written line for line as its
`JsonlMetricRecorder` (fairseq2 0.8) writes it: `Time` (ISO 8601, UTC) and `Step` first, then each
value under its descriptor's display name, ordered by the descriptor's priority. fairseq2 itself
needs its native library built for another torch than the one the tests pin, so the lines are
written here from its recorder's rules. Before, the folder was "unrecognised format", and its
training file alone was refused: "no step field"."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load
from monitor.store import open_store

START = datetime(2026, 12, 1, tzinfo=timezone.utc)
TOKENS_PER_STEP = 8 * 4096
# fairseq2's descriptors of the values its trainer and validator publish: display name, priority.
DESCRIPTORS = {
    "nll_loss": ("NLL Loss", 100), "grad_norm": ("Gradient Norm", 300), "data_epoch": ("Data Epoch", 490),
    "data_time": ("Data Time", 500), "compute_time": ("Compute Time", 501), "lapse_time": ("Lapse Time", 502),
    "total_time": ("Total Time", 505), "wall_time": ("Wall Time", 510), "lr": ("Learning Rate", 700),
    "batch_size": ("Batch Size", 800), "elements_per_second": ("Elements per Second", 810),
    "num_elements": ("Number of Elements", 830), "total_num_elements": ("Total Number of Elements", 850),
}


def _line(at: datetime, step: int | None, values: dict) -> str:
    """One line as the recorder writes it (record_metric_values)."""
    named = sorted((DESCRIPTORS[k] + (v,) for k, v in values.items()), key=lambda d: (d[1], d[0]))
    out = {"Time": at.isoformat()} | ({"Step": step} if step is not None else {})
    return json.dumps(out | {name: value for name, _, value in named}) + "\n"


def _loss(step: int) -> float:
    return 2.4 + 9.0 / math.sqrt(step)


def _train(step: int, lr=3e-4) -> dict:
    """What the trainer publishes every 10 steps (its LM recipe's values)."""
    return {"nll_loss": _loss(step), "grad_norm": 0.8, "data_epoch": 1, "data_time": 0.01, "compute_time": 0.9,
            "lapse_time": 9.2, "total_time": 9.2 * step / 10, "wall_time": 9.2 * step / 10, "lr": lr,
            "batch_size": 8, "elements_per_second": 35_600.0, "num_elements": 10 * TOKENS_PER_STEP,
            "total_num_elements": step * TOKENS_PER_STEP}


def _valid(step: int, offset: float) -> dict:
    """What the validator publishes (its `total_` values dropped, as fairseq2 drops them)."""
    return {"nll_loss": _loss(step) + offset, "batch_size": 8, "wall_time": 30.0}


def _run_job(metrics: Path, steps, valid_every: int = 250, at: datetime = START) -> datetime:
    """Trains `steps` (values every 10), validating on the `c4` and `wiki` units every `valid_every`;
    appends, as the recorder does. Returns the time after the last line."""
    (metrics / "valid").mkdir(parents=True, exist_ok=True)
    with open(metrics / "train.jsonl", "a") as train:
        for step in steps:
            at += timedelta(seconds=10)
            train.write(_line(at, step, _train(step)))
            if step % valid_every == 0:
                for unit, offset in (("c4", 0.1), ("wiki", 0.3)):
                    at += timedelta(seconds=1)
                    with open(metrics / "valid" / f"{unit}.jsonl", "a") as valid:
                        valid.write(_line(at, step, _valid(step, offset)))
    return at


def test_an_output_directory_is_one_run_with_its_meaning(tmp_path, sqlite_url):
    job = tmp_path / "llama3_1b_pretrain"
    _run_job(job / "metrics", range(10, 1001, 10))
    (job / "metrics" / "eval.jsonl").write_text(_line(START, None, {"nll_loss": 2.9}))  # a standalone evaluation
    assert detect_format(job) == detect_format(job / "metrics") == "fairseq2"
    run = load(job)
    assert run.profile == "fairseq2" and run.name_hint == "llama3_1b_pretrain" and run.attempts == 1
    data = run.to_run_data("f")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(10, 1001, 10)) and loss.loc[500] == pytest.approx(_loss(500))
    for unit, offset in (("c4", 0.1), ("wiki", 0.3)):
        held = data.series(schema.heldout_key(unit)).dropna()
        assert list(held.index) == [250, 500, 750, 1000]
        assert held.loc[750] == pytest.approx(_loss(750) + offset)
    assert data.series(schema.TRAIN_TOKENS).dropna().iloc[-1] == 1000 * TOKENS_PER_STEP
    assert data.series(schema.OPTIM_LR).dropna().iloc[0] == pytest.approx(3e-4)
    assert data.series(schema.TRAIN_GRAD_NORM).dropna().iloc[0] == pytest.approx(0.8)
    assert data.series("perf/tokens_per_s").dropna().iloc[0] == pytest.approx(35_600.0)
    assert run.scalars["wall_time"].notna().all()  # `Time` is each line's wall time, not a metric
    assert any("eval.jsonl: left out" in n and "no Step" in n for n in run.notes)
    # Through the command line, as a person imports it: one run, read back from the store.
    assert main(["import", str(job), "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        stored = store.load_run("llama3_1b_pretrain")
        assert list(stored.series(schema.heldout_key("c4")).dropna().index) == [250, 500, 750, 1000]
        assert stored.series(schema.TRAIN_LOSS).dropna().index[-1] == 1000


def test_a_job_resumed_from_its_checkpoint_is_a_restart_read_again_where_it_stopped(tmp_path, sqlite_url):
    """fairseq2 appends to the same files after a resume: steps after the checkpoint come again.
    The folder is imported while the job runs, then again after the resume."""
    job = tmp_path / "job"
    at = _run_job(job / "metrics", range(10, 601, 10))
    with open_store(sqlite_url) as store:
        assert main(["import", str(job), "--store", sqlite_url]) == 0
        _run_job(job / "metrics", range(510, 801, 10), at=at)  # preempted after 600, resumed from 500
        assert main(["import", str(job), "--store", sqlite_url]) == 0
        assert main(["import", str(job), "--store", sqlite_url]) == 0  # nothing new: nothing changes
        stored = store.load_run("job")
    whole = load(job).to_run_data("whole")
    train = stored.series(schema.TRAIN_LOSS).dropna()
    assert list(train.index) == list(range(10, 801, 10))
    assert train.equals(whole.series(schema.TRAIN_LOSS).dropna())
    assert [(int(e.step), e.kind) for e in stored.events.itertuples()] == [(510, schema.EventKind.RESTART.value)]
    assert list(stored.series(schema.heldout_key("c4")).dropna().index) == [250, 500, 750]


def test_the_training_file_alone_reads_on_its_step_and_time(tmp_path):
    _run_job(tmp_path / "metrics", range(10, 301, 10))
    train = load(tmp_path / "metrics" / "train.jsonl")
    assert detect_format(tmp_path / "metrics" / "train.jsonl") == "jsonl" and train.profile == "fairseq2"
    data = train.to_run_data("t")
    assert list(data.series(schema.TRAIN_LOSS).dropna().index) == list(range(10, 301, 10))
    assert train.scalars["wall_time"].iloc[0] == (START + timedelta(seconds=10)).timestamp()


def test_several_parameter_groups_learning_rates_are_said_to_be_left_out(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "train.jsonl").write_text("".join(_line(START + timedelta(seconds=s), s, _train(s, lr=[3e-4, 3e-5]))
                                                 for s in range(10, 101, 10)))
    run = load(metrics)
    assert any("Learning Rate (10)" in n for n in run.notes) and schema.OPTIM_LR not in run.keys
    assert any("no validation files" in n for n in run.notes)


def test_a_folder_of_another_trainers_train_jsonl_is_not_claimed(tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"step": 1, "Time": START.isoformat(), "loss": 2.0}) + "\n")
    assert detect_format(folder / "train.jsonl") == "jsonl"
    with pytest.raises(GapwatchError, match="unrecognised format"):
        detect_format(folder)


def test_its_tensorboard_folder_reads_with_the_same_meaning(tmp_path):
    """fairseq2's TensorBoardRecorder: a writer per section under tb/ (tb/train, tb/valid/c4), each
    value tagged with its display name; here torch's own SummaryWriter, as fairseq2 uses it."""
    from torch.utils.tensorboard import SummaryWriter

    tb = tmp_path / "job" / "tb"
    train, valid = SummaryWriter(str(tb / "train")), SummaryWriter(str(tb / "valid" / "c4"))
    for step in range(10, 501, 10):
        for (name, _), value in zip((DESCRIPTORS["nll_loss"], DESCRIPTORS["grad_norm"]), (_loss(step), 0.8)):
            train.add_scalar(name, value, step)
        if step % 250 == 0:
            valid.add_scalar(DESCRIPTORS["nll_loss"][0], _loss(step) + 0.1, step)
    train.close()
    valid.close()
    run = load(tb)
    assert run.profile == "fairseq2"
    data = run.to_run_data("t")
    assert list(data.series(schema.TRAIN_LOSS).dropna().index) == list(range(10, 501, 10))
    held = data.series(schema.heldout_key("c4")).dropna()
    assert list(held.index) == [250, 500] and held.loc[500] == pytest.approx(_loss(500) + 0.1, rel=1e-6)
