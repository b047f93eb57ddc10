"""Runs written by the real `wandb` SDK in offline mode (wandb_writer.py, one process each) as
users produce them: a run resumed twice with a rewind, a run cut short mid-write, a run killed
while logging, an HF-Trainer-shaped run that logs `train/global_step` every 10 steps, and a custom
loop that declares its own step key with `define_metric`."""

from __future__ import annotations

import shutil
import time

import pytest

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.wandb.run_file import WandbRunReader, find_run_file, logical_runs
from monitor.store import open_store

from .conftest import offline_run_dir, run_writer

RUN_ID = "resumed01"
# (first, last) trainer steps of each process: the third resumes from a checkpoint at step 45,
# below the 59 the second reached.
SEGMENTS = ((0, 30), (30, 60), (45, 70))


def _loss(step: int, first: int) -> float:
    return 10 - step / 100 + first / 1000  # as wandb_writer.segment logs it


def _next_second() -> None:
    # wandb names a run folder by its start second: each process starts in a second of its own.
    time.sleep(1.05 - time.time() % 1)


@pytest.fixture(scope="module")
def resumed_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb_resumed")
    for first, last in SEGMENTS:
        _next_second()
        run_writer(root, "segment", RUN_ID, True, str(first), str(last))
    return root


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb_hf")
    run_writer(root, "hf", 200)
    return offline_run_dir(root)


def test_resumed_run_is_one_run_whose_rewind_wins(resumed_root):
    folders = sorted((resumed_root / "wandb").glob("offline-run-*"))
    assert len(folders) == 3
    # Any one of the folders, or the wandb/ folder itself, is the whole run.
    for source in (folders[1], resumed_root / "wandb"):
        run = load(source)
        assert run.attempts == 3
        data = run.to_run_data("r")
        loss = data.series(schema.TRAIN_LOSS)
        assert list(loss.index) == list(range(70))
        assert loss.loc[10] == pytest.approx(_loss(10, 0))
        assert loss.loc[40] == pytest.approx(_loss(40, 30))  # the second segment's
        assert loss.loc[50] == pytest.approx(_loss(50, 45))  # the rewind's, not the second's
        assert loss.loc[69] == pytest.approx(_loss(69, 45))
        # The second segment's values at the rewound steps stay visible as repeats.
        again = data.repeats[(data.repeats["step"] == 50) & (data.repeats["attempt"] == 2)]
        assert again["value"].tolist() == [pytest.approx(_loss(50, 30))]
        assert any("3 segments" in n for n in run.notes)


def test_resumed_run_through_the_store(resumed_root, sqlite_url, capsys):
    assert main(["import", str(resumed_root / "wandb"), "--run", "res", "--store",
                 sqlite_url]) == 0
    assert "created run 'res'" in capsys.readouterr().err
    store = open_store(sqlite_url)
    try:
        loss = store.load_run("res").series(schema.TRAIN_LOSS)
        assert loss.loc[50] == pytest.approx(_loss(50, 45))
        assert loss.loc[59] == pytest.approx(_loss(59, 45))
        assert int(store.get_run("res")["attempts"]) == 3
    finally:
        store.close()


def test_a_wandb_folder_of_two_runs_offers_each(resumed_root, hf_run, tmp_path):
    both = tmp_path / "wandb"
    both.mkdir()
    for folder in [*(resumed_root / "wandb").glob("offline-run-*"), hf_run]:
        shutil.copytree(folder, both / folder.name)
    assert sorted(len(v) for v in logical_runs(both).values()) == [1, 3]
    with pytest.raises(GapwatchError, match=rf"holds 2 W&B runs; .*{RUN_ID} \(3 folders\)"):
        load(both)


def test_cut_by_a_few_bytes_imports_every_complete_record(resumed_root, tmp_path, sqlite_url,
                                                          capsys):
    # The first segment alone: a copy outside wandb's folders has no siblings to join.
    whole_file = tmp_path / "run-whole.wandb"
    shutil.copy(find_run_file(sorted((resumed_root / "wandb").glob("offline-run-*"))[0]),
                whole_file)
    whole = load(whole_file).to_run_data("w").series(schema.TRAIN_LOSS)
    assert len(whole) == 30
    cut = tmp_path / "run-cut.wandb"
    cut.write_bytes(whole_file.read_bytes()[:-5])
    assert main(["import", str(cut), "--run", "cut", "--store", sqlite_url]) == 0
    err = capsys.readouterr().err
    (warning,) = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "crashed" in warning and "bytes left unread" in warning
    store = open_store(sqlite_url)
    try:
        assert store.get_run("cut")["status"] == schema.RunStatus.CRASHED.value
        got = store.load_run("cut").series(schema.TRAIN_LOSS)
        assert got.to_dict() == whole.loc[got.index].to_dict() and len(got) >= len(whole) - 1
    finally:
        store.close()


def test_killed_while_logging(tmp_path):
    root = tmp_path / "killed"
    proc = run_writer(root, "live", 400, False)
    try:
        deadline = time.monotonic() + 120
        while not (root / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        # Kill it once wandb has written some of its history (it writes in blocks).
        run_file = find_run_file(offline_run_dir(root))
        while not len(WandbRunReader(run_file).read(follow=True)):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.kill()  # SIGKILL: wandb never writes its exit record
        proc.wait(timeout=30)
    # wandb's service process writes the file: wait until it stops growing.
    size = -1
    while size != run_file.stat().st_size:
        size = run_file.stat().st_size
        time.sleep(1.0)
    run = load(run_file)
    assert run.live or run.crashed
    loss = run.to_run_data("k").series(schema.TRAIN_LOSS)
    assert len(loss) >= 1 and list(loss.index) == list(range(len(loss)))
    assert loss.to_dict() == {s: pytest.approx(5.0 - s * 1e-3) for s in loss.index}


def test_hf_style_run_on_its_global_step(hf_run):
    run = load(hf_run)
    assert run.profile == "hf"
    data = run.to_run_data("hf")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(10, 201, 10))
    held = data.series(schema.heldout_key("eval")).dropna()
    assert list(held.index) == [50, 100, 150, 200]
    assert held.loc[100] == pytest.approx(3.2 - 100 / 400)
    rows = {r["source"]: r for r in run.mapping}
    assert rows["train/global_step"]["key"] == "(step axis)"
    assert rows["train/loss"]["cadence"] == "every 10 steps" and rows["train/loss"]["count"] == 20
    assert rows["eval/loss"]["cadence"] == "every 50 steps"
    assert rows["train/train_loss"]["key"] is None  # the run's final aggregate
    assert not any(k.startswith("train/train_") for k in run.keys)


def test_follow_puts_a_growing_run_on_its_global_step(hf_run, tmp_path, sqlite_url):
    """A follower reading the HF-style run as wandb writes it (a few KB appended between polls)
    stores what a whole import of the finished file stores: the trainer's step, not `_step`."""
    from monitor.importers import import_source
    from monitor.importers.follow import FollowConfig, follow

    whole = find_run_file(hf_run).read_bytes()
    growing = tmp_path / "run-grow.wandb"
    growing.write_bytes(whole[:2000])
    polls = []

    def grow(_seconds):
        size = growing.stat().st_size
        with open(growing, "ab") as fh:
            fh.write(whole[size:size + 3000])

    store = open_store(sqlite_url)
    try:
        last = follow(store, "f", str(growing), "wandb-file",
                      config=FollowConfig(poll_interval_s=0, max_polls=100), on_poll=polls.append,
                      sleep=grow)
        assert last.finished and len(polls) > 3
        data = store.load_run("f")
        assert list(data.series(schema.TRAIN_LOSS).dropna().index) == list(range(10, 201, 10))
        assert list(data.series(schema.heldout_key("eval")).dropna().index) == [50, 100, 150, 200]
        # Importing the finished file into the same run finds every row already there.
        result, _ = import_source(store, "f", growing)
        assert result.rows_new == 0 and result.rows_total == last.rows_total
    finally:
        store.close()


def test_follow_takes_a_named_step_key(hf_run, sqlite_url, capsys):
    source = str(find_run_file(hf_run))
    assert main(["import", source, "--run", "g", "--follow", "--step-key", "train/global_step",
                 "--poll-interval", "0.01", "--store", sqlite_url]) == 0
    assert "(finished)" in capsys.readouterr().err
    with open_store(sqlite_url) as store:
        loss = store.load_run("g").series(schema.TRAIN_LOSS).dropna()
        assert list(loss.index) == list(range(10, 201, 10))
    assert main(["import", source, "--run", "h", "--follow", "--step-key", "nope",
                 "--poll-interval", "0.01", "--store", sqlite_url]) == 2
    assert "step key 'nope' is not logged in this run" in capsys.readouterr().err



def test_a_step_key_the_run_declares_with_define_metric_is_its_step_axis(tmp_path, sqlite_url, capsys):
    # `optimizer_step` is no name gapwatch knows: only the run's own declaration makes it the axis
    # (W&B's row counter would put the first 100 optimizer steps at 0..119, evaluation rows included).
    root = tmp_path / "declared"
    run_writer(root, "declared", 100)
    run = load(offline_run_dir(root))
    loss = run.scalars[run.scalars["key"] == schema.TRAIN_LOSS]
    assert loss["step"].tolist() == list(range(4, 401, 4))
    held = run.scalars[run.scalars["key"].str.startswith("eval/heldout/")]
    assert held["step"].tolist() == list(range(80, 401, 80))  # at the optimizer step of the row before
    assert {r["source"]: r["reason"] for r in run.mapping}["optimizer_step"] == \
        "the trainer's step (declared by define_metric)"
    assert any("declares 'epoch', not 'optimizer_step'" in n and "(val/loss)" in n for n in run.notes)
    # A step key named on the command line still wins over the declared one.
    assert main(["import", str(offline_run_dir(root)), "--run", "declared", "--store", sqlite_url,
                 "--step-key", "epoch"]) == 0
    with open_store(sqlite_url) as store:
        marks = store.series_marks("declared")[schema.TRAIN_LOSS]
        assert (marks.first_step, marks.last_step) == (1, 4)  # epochs 1..4 hold train loss
    # Followed as it is written, on the declared key too.
    assert main(["import", str(offline_run_dir(root)), "--run", "followed", "--follow", "--poll-interval", "0.01",
                 "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        assert list(store.load_run("followed").series(schema.TRAIN_LOSS).dropna().index) == list(range(4, 401, 4))
    capsys.readouterr()
