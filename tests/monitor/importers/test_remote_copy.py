"""Sources on object stores (monitor/importers/remote_copy.py), on fsspec's in-memory filesystem:
the same calls gcsfs and s3fs answer for a bucket."""

from __future__ import annotations

import json

import fsspec
import pytest
from torch.utils.tensorboard import SummaryWriter

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.follow import FollowConfig, follow
from monitor.importers.remote_copy import is_remote, local_copy
from monitor.store import open_store


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """A model folder in a bucket, as a TPU job leaves it: TensorBoard's train/ beside checkpoints."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    local = tmp_path / "written"
    writer = SummaryWriter(str(local / "train"))
    for step in range(100, 2001, 100):
        writer.add_scalar("loss", 4 - step / 1000, step)
    writer.close()
    fs = fsspec.filesystem("memory")
    root = f"/bucket-{tmp_path.name}/model"
    fs.put(str(local), root, recursive=True)
    fs.pipe(f"{root}/checkpoint_1000/target.params/0.0", b"\0" * 4096)  # tensorstore chunks
    fs.pipe(f"{root}/checkpoint_1000/metadata.json", b"{}")
    yield f"memory://{root.lstrip('/')}", fs, root
    fs.rm(root, recursive=True)


def test_a_folder_in_a_bucket_is_read_from_a_copy_of_what_an_import_reads(bucket, tmp_path):
    url, fs, root = bucket
    assert is_remote(url) and not is_remote("wandb://e/p/r") and not is_remote("https://example.org/x")
    run = load(url)
    assert list(run.to_run_data("tpu").series(schema.TRAIN_LOSS).index) == list(range(100, 2001, 100))
    copy = local_copy(url)
    assert run.source == str(copy) and copy.is_relative_to(tmp_path / "cache")
    assert [p.name for p in copy.rglob("*") if p.is_file() and "tfevents" in p.name]
    assert not (copy / "checkpoint_1000").exists()  # checkpoints are never copied


def test_a_copy_is_brought_up_to_date_by_what_grew(bucket):
    url, fs, root = bucket
    first = {p: p.stat().st_mtime_ns for p in local_copy(url).rglob("*") if p.is_file()}
    fs.pipe(f"{root}/train/notes.txt", b"hello")
    again = {p: p.stat().st_mtime_ns for p in local_copy(url).rglob("*") if p.is_file()}
    assert {p: t for p, t in again.items() if p in first} == first  # nothing copied twice
    assert {p.name for p in set(again) - set(first)} == {"notes.txt"}


def test_gapwatch_import_takes_a_bucket_url(bucket, sqlite_url, capsys):
    url, *_ = bucket
    assert main(["import", url, "--run", "tpu", "--store", sqlite_url]) == 0
    err = capsys.readouterr().err
    assert f"copying 1 of the 1 file(s) an import reads of {url}" in err
    with open_store(sqlite_url) as store:
        assert len(store.read_scalars("tpu", [schema.TRAIN_LOSS], max_points=1000)) == 20


def test_each_way_a_remote_source_fails_is_one_clear_error(bucket):
    url, *_ = bucket
    with pytest.raises(GapwatchError, match="no such file or folder"):
        load(url + "-missing")
    with pytest.raises(GapwatchError, match="s3fs"):  # its package is not installed here
        load("s3://bucket/model")
    empty = fsspec.filesystem("memory")
    empty.pipe(f"/{url.split('://')[1]}-ckpt/checkpoints/step_1.bin", b"\0")
    with pytest.raises(GapwatchError, match="no file here that an import reads"):
        load(url + "-ckpt")


@pytest.mark.parametrize("name, fmt", [("metrics.jsonl", "jsonl"), ("train.log", "llmc-log")])
def test_a_log_in_a_bucket_is_followed_as_it_grows(bucket, sqlite_url, name, fmt):
    url, fs, root = bucket

    def lines(upto: int) -> bytes:
        if fmt == "jsonl":
            return "".join(json.dumps({"step": s, "train/loss": 4 - s / 1000}) + "\n" for s in range(1, upto + 1)).encode()
        return "".join(f"step:{s}/400 train_loss:{4 - s / 1000:.4f} train_time:{s}ms step_avg:1ms\n"
                       for s in range(1, upto + 1)).encode()

    fs.pipe(f"{root}/{name}", lines(100))
    polls = []
    with open_store(sqlite_url) as store:
        follow(store, "live", f"{url}/{name}", fmt, config=FollowConfig(poll_interval_s=0.0, max_polls=2),
               on_poll=polls.append, sleep=lambda _: fs.pipe(f"{root}/{name}", lines(250)))
        assert len(polls) == 2 and all(p.rows_new > 0 for p in polls)  # each poll found rows
        assert len(store.read_scalars("live", [schema.TRAIN_LOSS], max_points=1000)) == 250
