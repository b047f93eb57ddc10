"""DeepSpeed's CSV monitor folder (monitor/importers/deepspeed_csv.py), written as its csv_monitor
writes it: a file a series in output_path/job_name, named for the series with `/` and spaces made
`_`, appended to by each process, which first writes the header `step,<the name's last part>`
with the csv module, then `step,value` rows at global_samples. A job resumed from a checkpoint is
a second process appending to the same files: the header again, mid-file."""

from __future__ import annotations

import csv
import math

import pytest

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, import_source, load
from monitor.importers.deepspeed_csv import parse_deepspeed_csv, recognize
from monitor.importers.formats import Probe
from monitor.store import open_store

SAMPLES_PER_STEP = 64
TIMES = ("forward", "backward", "backward_inner", "backward_allreduce", "step")


class _Process:
    """One process of a DeepSpeed job with the CSV monitor on: the files it has written to, so
    that it writes each file's header once (the monitor keeps that list per process)."""

    def __init__(self, folder) -> None:
        self.folder = folder
        self.headed: set[str] = set()

    def write_events(self, events) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for log_name, value, step in events:
            stem = log_name.replace("/", "_").replace(" ", "_")
            with open(self.folder / f"{stem}.csv", "a+") as fh:
                writer = csv.writer(fh)
                if stem not in self.headed:
                    self.headed.add(stem)
                    writer.writerow(["step", log_name.split("/")[-1]])
                writer.writerow([step, value])


def _train(process: _Process, steps, loss_shift: float = 0.0, nan_at: int | None = None) -> None:
    """The engine's events at each optimizer step, at global_samples (wall_clock_breakdown on)."""
    for step in steps:
        samples = step * SAMPLES_PER_STEP
        loss = math.nan if step == nan_at else 4 - step * 0.005 + loss_shift
        process.write_events([("Train/Samples/train_loss", loss, samples),
                              ("Train/Samples/lr", 1e-4, samples),
                              ("Train/Samples/loss_scale", 65536.0, samples)])
        process.write_events([(f"Train/Samples/elapsed_time_ms_{t}", 120.0, samples) for t in TIMES])


@pytest.fixture
def resumed_job(tmp_path):
    """A job killed after step 150 and resumed from step 100's checkpoint by a second process."""
    folder = tmp_path / "ds_logs" / "bert_job"
    _train(_Process(folder), range(1, 151), nan_at=40)
    _train(_Process(folder), range(101, 201), loss_shift=0.01)
    return folder


def test_the_folder_is_written_as_deepspeed_writes_it(resumed_job):
    lines = (resumed_job / "Train_Samples_train_loss.csv").read_text().splitlines()
    assert lines[0] == "step,train_loss" and lines[1] == "64,3.995" and lines[40] == "2560,nan"
    assert [n for n, line in enumerate(lines, 1) if line == "step,train_loss"] == [1, 152]
    assert len(list(resumed_job.glob("*.csv"))) == 3 + len(TIMES)


def test_a_resumed_job_is_one_run_on_optimizer_steps_with_a_second_attempt(resumed_job):
    assert detect_format(resumed_job) == "deepspeed-csv"
    run = load(resumed_job)
    assert run.profile == "deepspeed"
    assert run.key_map["Train/Samples/train_loss"] == schema.TRAIN_LOSS
    assert run.key_map["Train/Samples/lr"] == schema.OPTIM_LR
    assert any(f"{SAMPLES_PER_STEP} samples a step" in n for n in run.notes)
    assert run.attempts == 2
    assert [(e["step"], e["kind"], e["attempt"]) for e in run.events] == [(101, "restart", 2)]
    data = run.to_run_data("ds")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(1, 201))
    assert loss.loc[100] == pytest.approx(3.5) and loss.loc[120] == pytest.approx(3.41)  # the resume wins
    assert math.isnan(loss.loc[40]) and 40 in data.logged_nonfinite["step"].tolist()
    replayed = data.repeats[data.repeats["key"] == schema.TRAIN_LOSS]
    assert sorted(set(replayed["step"])) == list(range(101, 151)) and set(replayed["attempt"]) == {1, 2}
    assert data.series(schema.OPTIM_LR).index[-1] == 200
    forward = run.key_map["Train/Samples/elapsed_time_ms_forward"]
    assert list(data.series(forward).index) == list(range(1, 201))


def test_import_source_stores_it_under_the_jobs_name(resumed_job, sqlite_url):
    with open_store(sqlite_url) as store:
        result, summary = import_source(store, None, resumed_job)
        assert result.run == "bert_job" and result.events == 1
        assert schema.TRAIN_LOSS in summary.keys and summary.profile == "deepspeed"
        assert store.get_run("bert_job")["attempts"] == 2
        stored = store.load_run("bert_job")
        assert list(stored.series(schema.TRAIN_LOSS).index) == list(range(1, 201))
        assert stored.series(schema.TRAIN_LOSS).loc[120] == pytest.approx(3.41)
        assert stored.events["kind"].tolist() == ["restart"] and stored.events["step"].tolist() == [101]
        again, _ = import_source(store, None, resumed_job)
        assert again.rows_new == 0


def test_names_are_rebuilt_from_the_file_and_its_header(tmp_path):
    folder = tmp_path / "job"
    _Process(folder).write_events([("Train/Eigenvalues/ModelBlockParam_0", 0.5, 640),
                                   ("Eval/heldout loss", 3.2, 640),
                                   ("my_eval/loss", 3.3, 640),
                                   ("accuracy", 0.7, 640)])
    assert (folder / "Eval_heldout_loss.csv").read_text().startswith("step,heldout loss")
    run = parse_deepspeed_csv(folder)
    assert run.keys == ["Eval/heldout loss", "Train/Eigenvalues/ModelBlockParam_0", "accuracy",
                        "my/eval/loss"]  # an `_` in a user's own prefix reads as a `/`
    assert run.scalars["step"].tolist() == [640] * 4 and run.attempts == 1 and not run.events


def _unrelated(folder):
    folder.mkdir()
    (folder / "results.csv").write_text("model,accuracy\nbert,0.7\n")
    (folder / "data.csv").write_text("step,value\n1,2.0\n")
    return folder


def test_other_csv_folders_and_files_are_not_claimed(tmp_path, resumed_job):
    unrelated = _unrelated(tmp_path / "tables")
    assert not recognize(Probe.of(unrelated))
    with pytest.raises(GapwatchError, match="unrecognised format"):
        detect_format(unrelated)
    mixed = tmp_path / "mixed"
    _train(_Process(mixed), range(1, 3))
    (mixed / "notes.csv").write_text("step,value\n1,2.0\n")  # one file not DeepSpeed's
    assert not recognize(Probe.of(mixed))
    version = tmp_path / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    (version / "metrics.csv").write_text("step,train_loss\n0,3.0\n")
    assert detect_format(version) == "csv"  # a Lightning CSVLogger folder stays Lightning's
    assert detect_format(resumed_job / "Train_Samples_train_loss.csv") == "csv"  # one file is a generic log


def _loss_file(folder, *rows: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "Train_Samples_train_loss.csv"
    path.write_text("step,train_loss\r\n64,4.0\r\n" + "".join(rows))
    return path


@pytest.mark.parametrize("rows, message", [
    ("128,3.9,1\r\n", r"line 3: '128,3.9,1' is not a `step,value` row"),
    ("abc,3.9\r\n", r"line 3: step 'abc' is not a whole number"),
    ("-128,3.9\r\n", r"line 3: step '-128' is not a whole number"),
    ("128,3.9\r\nstep,lr\r\n192,3.8\r\n", r"line 4: the header 'step,lr' differs from the file's own 'step,train_loss'"),
    ("99999999999999999999999,3.9\r\n", r"line 3: step 9999.* is beyond the largest step"),
])
def test_a_malformed_row_is_one_error_naming_the_file_and_line(tmp_path, rows, message):
    path = _loss_file(tmp_path / "job", rows)
    assert detect_format(path.parent) == "deepspeed-csv"
    with pytest.raises(GapwatchError, match=message) as err:
        load(path.parent)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_a_file_with_another_header_is_not_claimed_and_refused_when_named(tmp_path):
    folder = tmp_path / "job"
    _loss_file(folder, "128,3.9\r\n")
    (folder / "Train_Samples_lr.csv").write_text("step,learning_rate\n64,1e-4\n")
    with pytest.raises(GapwatchError, match="unrecognised format"):
        load(folder)
    with pytest.raises(GapwatchError, match=r"Train_Samples_lr.csv: line 1: 'step,learning_rate' is not the header"):
        load(folder, fmt="deepspeed-csv")
    with pytest.raises(GapwatchError, match="not a folder"):
        load(folder / "Train_Samples_lr.csv", fmt="deepspeed-csv")


def test_a_line_still_being_written_and_text_values_are_left_out_with_notes(tmp_path):
    folder = tmp_path / "job"
    _loss_file(folder, "128,3.9\r\n192,tensor(3.8)\r\n256,3.7\r\n320,3.")  # the last row half written
    (folder / "Train_Samples_lr.csv").write_text("")  # created, its first row not yet written
    run = load(folder)
    # The value left out leaves a gap of two steps, so the series keeps its samples (sample_steps).
    assert run.to_run_data("ds").series(schema.TRAIN_LOSS).to_dict() == {64: 4.0, 128: 3.9, 256: 3.7}
    assert any("line 6 has no newline yet (still being written): left out" in n for n in run.notes)
    assert any("values that are not numbers left out: 1 (the first, line 4: 'tensor(3.8)')" in n for n in run.notes)
    assert any("Train_Samples_lr.csv: empty (nothing logged yet)" in n for n in run.notes)


def test_the_cli_says_a_bad_folder_in_one_line(tmp_path, sqlite_url, capsys):
    path = _loss_file(tmp_path / "job", "128,3.9\r\n192;3.8\r\n")
    assert main(["import", str(path.parent), "--run", "ds", "--store", sqlite_url]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("gapwatch import: error:") and "line 4" in err and "Traceback" not in err
    with open_store(sqlite_url) as store:
        assert store.get_run("ds") is None  # never half an import


def test_a_folder_read_between_the_files_of_a_step_is_read_on_later(tmp_path, sqlite_url):
    """DeepSpeed writes a step's series one file after the other: a read that falls between them
    leaves that step out, with a note, and a later read into the same run stores the folder as a
    whole read of it does."""
    folder = tmp_path / "ds_logs" / "job"
    process = _Process(folder)
    _train(process, range(1, 51))
    samples = 51 * SAMPLES_PER_STEP
    process.write_events([("Train/Samples/train_loss", 3.7, samples)])  # the rest of step 51 to come
    mid = load(folder)
    assert mid.to_run_data("ds").series(schema.TRAIN_LOSS).index[-1] == 50
    assert any("step 3,264 has 1 of its series so far" in n and "Train/Samples/lr" in n for n in mid.notes)
    with open_store(sqlite_url) as store:
        import_source(store, "followed", folder)
        process.write_events([("Train/Samples/lr", 1e-4, samples), ("Train/Samples/loss_scale", 65536.0, samples)])
        process.write_events([(f"Train/Samples/elapsed_time_ms_{t}", 120.0, samples) for t in TIMES])
        _train(process, range(52, 61))
        again, _ = import_source(store, "followed", folder)  # refused as a changed source before
        assert again.rows_new > 0
        import_source(store, "whole", folder)
        followed, whole = store.load_run("followed"), store.load_run("whole")
        assert followed.series(schema.TRAIN_LOSS).to_dict() == whole.series(schema.TRAIN_LOSS).to_dict()
        assert followed.series(schema.TRAIN_LOSS).loc[51] == pytest.approx(3.7)
        assert list(whole.series(schema.OPTIM_LR).index) == list(range(1, 61))  # a finished step is kept
