"""Scalars downloaded from TensorBoard's page ("Download CSV" / "JSON" under a chart): the
download's body made by TensorBoard's own scalars plugin from event files a real SummaryWriter
wrote, saved under the name its Scalars page gives it (`run-<run>-tag-<tag>.csv`). Before, the CSV
was read as two series called `Wall time` and `Value`, and the JSON was refused."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load
from monitor.store import open_store

STEPS, EVAL_EVERY = 300, 50


def _download(logdir, run: str, tag: str, fmt: str) -> str:
    """What TensorBoard serves for the download link of one tag of one run."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.scalar import scalars_plugin

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(logdir))
    plugin = scalars_plugin.ScalarsPlugin(base_plugin.TBContext(logdir=str(logdir), data_provider=provider,
                                                                multiplexer=mux))
    body, _ = plugin.scalars_impl(context.RequestContext(), tag, run, "", fmt)
    return body if fmt == "csv" else json.dumps(body)


def _write_runs(logdir, runs=("version_0",), steps=STEPS) -> None:
    from torch.utils.tensorboard import SummaryWriter

    for i, run in enumerate(runs):
        with SummaryWriter(str(logdir / run)) as writer:
            for step in range(1, steps + 1):
                writer.add_scalar("train_loss", 3.0 + i + 10 / step, step)
                if step % EVAL_EVERY == 0:
                    writer.add_scalar("val_loss", 3.1 + i + 10 / step, step)


def _save(folder, logdir, run: str, tag: str, fmt: str):
    folder.mkdir(exist_ok=True)
    path = folder / f"run-{run}-tag-{tag}.{fmt}"
    path.write_text(_download(logdir, run, tag, fmt), newline="")
    return path


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_download_is_one_series_named_by_its_tag(tmp_path, fmt):
    _write_runs(tmp_path / "logs")
    path = _save(tmp_path / "dl", tmp_path / "logs", "version_0", "train_loss", fmt)
    assert detect_format(path) == "tensorboard-export"
    run = load(path)
    assert run.name_hint == "version_0"
    loss = run.to_run_data("v").series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(1, STEPS + 1))
    assert loss.loc[10] == pytest.approx(4.0)
    assert run.scalars["wall_time"].notna().all() and not run.notes


def test_a_folder_of_one_runs_downloads_is_that_run(tmp_path, sqlite_url):
    _write_runs(tmp_path / "logs")
    folder = tmp_path / "dl"
    _save(folder, tmp_path / "logs", "version_0", "train_loss", "csv")
    _save(folder, tmp_path / "logs", "version_0", "val_loss", "json")
    assert detect_format(folder) == "tensorboard-export"
    assert main(["import", str(folder), "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        data = store.load_run("version_0")
    assert list(data.series(schema.heldout_key("val")).dropna().index) == list(range(50, STEPS + 1, 50))
    assert data.series(schema.TRAIN_LOSS).dropna().index[-1] == STEPS


def test_a_folder_of_several_runs_imports_the_one_named_or_each(tmp_path, sqlite_url):
    _write_runs(tmp_path / "logs", runs=("adamw", "muon"))
    folder = tmp_path / "dl"
    for run in ("adamw", "muon"):
        _save(folder, tmp_path / "logs", run, "train_loss", "csv")
    with pytest.raises(GapwatchError, match=r"2 runs \(adamw, muon\): import one with --run NAME"):
        load(folder)
    assert main(["import", str(folder), "--run", "muon", "--store", sqlite_url]) == 0
    assert main(["import", str(folder), "--all-runs", "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        assert sorted(store.list_runs()["name"]) == ["adamw", "muon"]
        assert store.load_run("muon").series(schema.TRAIN_LOSS).loc[10] == pytest.approx(5.0)


def test_the_sample_the_page_holds_of_a_long_tag_is_told(tmp_path):
    """TensorBoard's page holds about 1,000 points of a tag: a long run's download is a sample."""
    _write_runs(tmp_path / "logs", steps=3000)
    path = _save(tmp_path / "dl", tmp_path / "logs", "version_0", "train_loss", "csv")
    run = load(path)
    assert len(run.scalars) < 3000
    assert any("looks like the sample of a tag TensorBoard's page holds" in n for n in run.notes)


def test_a_download_named_otherwise_says_what_it_called_the_series(tmp_path):
    """The Time Series page names a download after its run alone (`version_0.csv`)."""
    _write_runs(tmp_path / "logs")
    path = tmp_path / "version_0.csv"
    path.write_text(_download(tmp_path / "logs", "version_0", "train_loss", "csv"), newline="")
    run = load(path)
    assert run.keys == ["extra/version_0"]
    assert any("name the file after its tag" in n for n in run.notes)


def test_a_damaged_download_is_one_line_naming_where(tmp_path):
    path = tmp_path / "run-a-tag-loss.csv"
    path.write_text("Wall time,Step,Value\r\n1.0,1,3.0\r\n1.0,x,3.0\r\n")
    with pytest.raises(GapwatchError, match=r"run-a-tag-loss.csv: line 3: .* is not wall time, step and value"):
        load(path)
    other = tmp_path / "loss.csv"
    other.write_text("step,loss\n1,3.0\n")
    assert detect_format(other) == "csv"  # any other CSV stays a generic log
