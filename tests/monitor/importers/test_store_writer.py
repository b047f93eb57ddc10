"""Imports into real stores (SQLite and PostgreSQL): atomic, idempotent, growing sources."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.store_writer import write_run
from monitor.store import open_store


def _llmc(shared_data):
    return shared_data / "runs/modded-nanogpt/llmc_gpt2_124M_2024-10-13/main.log"


def test_import_is_idempotent_and_round_trips(store_url, shared_data):
    store = open_store(store_url)
    run = load(_llmc(shared_data))
    first = write_run(store, "llmc", run)
    assert first.created and first.rows_new == len(run.scalars) == 58760
    again = write_run(store, "llmc", load(_llmc(shared_data)))
    assert again.rows_new == 0 and not again.created
    stored = store.load_run("llmc")
    expected = run.to_run_data("llmc")
    for key in expected.scalars.columns:
        assert stored.series(key).equals(expected.series(key)), key
    assert store.count_rows("llmc") == 58760
    assert store.get_run("llmc")["status"] == "imported"
    store.close()


def test_failure_leaves_nothing_behind(sqlite_url, shared_data, monkeypatch):
    store = open_store(sqlite_url)
    run = load(_llmc(shared_data))
    run.events.append({"step": 1, "kind": "restart", "payload": {}})

    def broken(name, events):
        raise GapwatchError("disk full")

    monkeypatch.setattr(store, "write_events", broken)
    with pytest.raises(GapwatchError, match="disk full"):
        write_run(store, "llmc", run)
    assert store.get_run("llmc") is None
    store.close()


def test_growing_log_adds_only_new_rows(sqlite_url, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"s:{s} trl:{3 - s / 100:.4f} lr:0.0001 norm:1.0\n" for s in range(50)))
    store = open_store(sqlite_url)
    assert write_run(store, "live", load(log)).rows_new == 150
    with log.open("a") as fh:
        fh.write("".join(f"s:{s} trl:{3 - s / 100:.4f} lr:0.0001 norm:1.0\n"
                         for s in range(50, 60)))
    assert write_run(store, "live", load(log)).rows_new == 30
    assert store.load_run("live").series(schema.TRAIN_LOSS).index.max() == 59
    # Rewriting a row that was imported already is refused, not mixed in.
    log.write_text(log.read_text().replace("s:3 trl:2.9700", "s:3 trl:9.9999"))
    with pytest.raises(GapwatchError, match="rows imported into run 'live' before have changed"):
        write_run(store, "live", load(log))
    store.close()


def test_refuses_to_mix_sources_or_write_into_a_live_run(sqlite_url, shared_data, tmp_path):
    store = open_store(sqlite_url)
    write_run(store, "a", load(_llmc(shared_data)))
    other = tmp_path / "other.log"
    shutil.copy(_llmc(shared_data), other)
    with pytest.raises(GapwatchError, match="would mix two sources"):
        write_run(store, "a", load(other))
    store.ensure_run("mine")
    store.write_metrics("mine", pd.DataFrame(
        {"step": [1], "key": [schema.TRAIN_LOSS], "value": [1.0]}))
    with pytest.raises(GapwatchError, match="already exists .* and was not imported"):
        write_run(store, "mine", load(_llmc(shared_data)))
    store.close()


def test_reference_of_and_attempts(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    store.ensure_run("ours")
    log = tmp_path / "restarted.log"
    log.write_text("s:0 trl:3.0\ns:1 trl:2.9\ns:2 trl:2.85\ns:1 trl:2.95\ns:2 trl:2.8\n")
    write_run(store, "ref", load(log), reference_of="ours")
    assert store.get_run("ours")["reference"] == "ref"
    assert store.get_run("ref")["attempts"] == 2
    data = store.load_run("ref")
    assert data.series(schema.TRAIN_LOSS).to_dict() == {0: 3.0, 1: 2.95, 2: 2.8}
    assert list(data.events["kind"]) == ["restart"]
    with pytest.raises(GapwatchError, match="--reference-of 'nobody': no such run"):
        write_run(store, "ref2", load(log), reference_of="nobody")
    assert store.get_run("ref2") is None
    store.close()


def test_wandb_run_keeps_wall_time(sqlite_url, rich_run):
    store = open_store(sqlite_url)
    run = load(rich_run)
    write_run(store, "rich", run)
    frame = store.read_scalars(["rich"], [schema.TRAIN_LOSS])
    assert len(frame) == 60
    assert store.run_info("rich").tokens_per_step == 4096
    assert store.get_run("rich")["config"]["summary"]["final/best_loss"] == 1.25
    store.close()


def test_a_streamed_import_writes_straight_into_chunks(sqlite_url, tmp_path, monkeypatch):
    """Chunks of a log smaller than a chunk of steps are written once the chunk is complete, up
    to its last step: the row table takes only the rows of the last chunk, not every row, to
    move them again on the next write."""
    import json

    from monitor.importers import import_source, table_stream
    from monitor.store import chunks, metrics_writer

    monkeypatch.setattr(table_stream, "BLOCK_BYTES", 1 << 10)
    monkeypatch.setattr(table_stream, "CHUNK_ROWS", 30)
    width = chunks.CHUNK_STEPS
    steps = 4 * width + 36
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"step": s, "train/loss": 1.0 + s, "train/grad_norm": 0.5})
                            + "\n" for s in range(steps)))
    raw = []
    insert_raw = metrics_writer._insert_raw
    monkeypatch.setattr(metrics_writer, "_insert_raw",
                        lambda conn, run_id, batch, **kw: (raw.append(len(batch.steps)),
                                                           insert_raw(conn, run_id, batch, **kw)))
    with open_store(sqlite_url) as store:
        import_source(store, "r", path)
        loss = store.load_run("r").series(schema.TRAIN_LOSS)
    assert loss.index.tolist() == list(range(steps)) and loss.iloc[-1] == steps
    # Two series, each: the 36 rows of the last chunk, which its last step does not end (one
    # row table row a value: 500 before imports cut their writes at chunk ends).
    assert sum(raw) == 2 * 36
