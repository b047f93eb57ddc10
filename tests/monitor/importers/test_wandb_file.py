"""`.wandb` run files: runs written by the real wandb package, a live one, damaged ones, and
hand-built records that the fast reader must decode exactly as wandb's own classes do."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wandb.proto import wandb_internal_pb2 as wpb

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.wandb import log_format
from monitor.importers.wandb.run_file import (WandbRunReader, find_run_file, parse_wandb_run,
                                          to_imported)
from bench.wandb_log_writer import encode_log
from monitor.importers.wandb.log_format import BLOCK_SIZE, FILE_HEADER, read_records
from monitor.importers.wandb.records import decode_exact
from monitor.importers.wandb.wire import TAIL_MARGIN
from monitor.store import open_store

from .conftest import offline_run_dir, run_writer

# How long a test waits for the child wandb process (it starts wandb's core service).
LIVE_WAIT_S = 120


def _exact_rows(path):
    """Rows as wandb's own protobuf classes decode them: {(step, name): json text}."""
    buf = path.read_bytes()
    found = read_records(buf, str(path))
    exact = decode_exact([(i, found.payload(buf, i)) for i in range(found.count)], str(path))
    rows, steps = {}, {}
    for rec, name, text in exact.history:
        if name == "_step":
            steps[rec] = int(text)
    for rec, name, text in exact.history:
        if not name.startswith("_"):
            rows[(steps[rec], name)] = text
    return rows, exact


def test_real_run_matches_wandbs_own_decoder(rich_run):
    path = find_run_file(rich_run)
    run = parse_wandb_run(rich_run)
    rows, exact = _exact_rows(path)
    got = {(int(s), str(k)): v for s, k, v in
           zip(run.scalars["step"], run.scalars["key"], run.scalars["value"])}
    numeric = {}
    for (step, name), text in rows.items():
        value = json.loads(text)
        if isinstance(value, bool):
            numeric[(step, name)] = float(value)
        elif isinstance(value, (int, float)):
            numeric[(step, name)] = float(value)
    assert got.keys() == numeric.keys()
    for key, value in numeric.items():
        assert (math.isnan(value) and math.isnan(got[key])) or got[key] == value, key
    assert exact.finished and not run.live


def test_real_run_values_config_summary(rich_run):
    run = load(rich_run)
    assert run.profile == "gapwatch" and run.name_hint == "rich-ref"
    data = run.to_run_data("ref")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(60)) and math.isnan(loss.loc[7])
    grad = data.series(schema.TRAIN_GRAD_NORM)
    assert grad.loc[8] == math.inf and grad.loc[9] == -math.inf
    assert set(map(tuple, data.logged_nonfinite[["key", "step"]].values)) == {
        (schema.TRAIN_LOSS, 7), (schema.TRAIN_GRAD_NORM, 8), (schema.TRAIN_GRAD_NORM, 9)}
    assert data.series("flags/is_best").to_dict() == {0: 1.0, 10: 0.0, 20: 1.0, 30: 0.0,
                                                       40: 1.0, 50: 0.0}
    assert data.series("extra/eval.nested.acc").loc[20] == pytest.approx(0.25 + 20 / 240)
    assert data.series(schema.heldout_key("c4")).index.tolist() == [0, 10, 20, 30, 40, 50]
    assert run.config == {"lr": 3e-4, "model": {"d_model": 128, "layers": 2},
                          "tokens_per_step": 4096}
    assert run.tokens_per_step == 4096
    assert run.summary["final/best_loss"] == 1.25
    assert run.summary["train/loss"] == pytest.approx(4.0 - 59 / 60)
    assert "hist/weights.values" not in run.summary
    assert any("notes/long (6)" in n for n in run.notes)
    wall = run.scalars["wall_time"].to_numpy()
    assert np.isfinite(wall).all() and wall.min() > 1.6e9


def test_live_run_then_follow_to_the_end(tmp_path):
    proc = run_writer(tmp_path, "live", 400, wait=False)
    try:
        deadline = time.monotonic() + LIVE_WAIT_S
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        assert (tmp_path / "ready").exists(), "the wandb child never got going"
        path = find_run_file(offline_run_dir(tmp_path))
        run = parse_wandb_run(path)  # while wandb is still writing it
        assert run.live and any("taken as still running" in n for n in run.notes)
        early = run.to_run_data("live").series(schema.TRAIN_LOSS)
        assert list(early.index) == list(range(len(early)))
        follower = WandbRunReader(path)
        seen = len(follower.read(follow=True))
        (tmp_path / "go").write_text("")
        while not follower.finished and time.monotonic() < deadline:
            seen += len(follower.read(follow=True))
            time.sleep(0.2)
        assert follower.finished, "the run never finished"
        assert seen == 2 * 800  # 800 steps, two metrics
        assert follower.last_step == 799
    finally:
        proc.wait(timeout=LIVE_WAIT_S)


# --- damaged files ---------------------------------------------------------------------------------
@pytest.fixture
def rich_copy(rich_run, tmp_path):
    copy = tmp_path / "run-copy.wandb"
    shutil.copy(find_run_file(rich_run), copy)
    return copy


def test_truncated_file_imports_its_complete_records_as_a_crashed_run(rich_copy):
    whole = load(rich_copy).scalars
    data = rich_copy.read_bytes()
    cut = BLOCK_SIZE + 1000  # inside a chunk, not on a block boundary
    rich_copy.write_bytes(data[:cut])
    run = load(rich_copy)
    assert run.crashed and not run.live
    (warning,) = [n for n in run.notes if "crashed" in n]
    unread = int(re.search(r"([\d,]+) bytes left unread", warning).group(1).replace(",", ""))
    assert 0 < unread < 32 * 1024
    # Every complete record: the rows are the whole run's first rows.
    got = run.scalars[["step", "key", "value"]].astype({"key": str})
    want = whole[["step", "key", "value"]].astype({"key": str}).iloc[:len(got)]
    assert 0 < len(got) < len(whole)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    # A follower takes the complete records and waits for the rest.
    reader = WandbRunReader(rich_copy)
    assert len(reader.read(follow=True)) > 0 and reader.offset < cut


def test_flipped_byte_fails_the_checksum(rich_copy):
    data = bytearray(rich_copy.read_bytes())
    found = read_records(bytes(data), "x")
    victim = found.count // 2
    while found.starts[victim] < 0:
        victim += 1
    data[int(found.starts[victim]) + 5] ^= 0xFF
    rich_copy.write_bytes(bytes(data))
    with pytest.raises(GapwatchError,
                       match=rf"record {victim + 1} at byte \d+: checksum mismatch"):
        load(rich_copy)


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"PK\x03\x04 not wandb", "not a W&B run file"),
    (b":W&B\x00\x00\x00" + b"\x00" * 20, "unsupported W&B log header"),
])
def test_not_a_wandb_file(tmp_path, content, message):
    path = tmp_path / "run-x.wandb"
    path.write_bytes(content)
    with pytest.raises(GapwatchError, match=message):
        parse_wandb_run(path)


def test_unknown_chunk_type(tmp_path):
    bodies = [_history(step, {"train/loss": "1.0"}, num=step + 1).SerializeToString() for step in range(5)]
    raw = bytearray(encode_log(bodies))
    # The third record's chunk header: checksum (4 bytes), length (2), type (1).
    third = len(FILE_HEADER) + sum(7 + len(b) for b in bodies[:2])
    raw[third + 6] = 9
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(raw))
    with pytest.raises(GapwatchError, match=f"record 3 at byte {third}: unknown chunk type 9"):
        parse_wandb_run(path)


def _history(step, items: dict[str, str], num: int = 1) -> wpb.Record:
    rec = wpb.Record(num=num)
    for name, text in {**items, "_step": str(step)}.items():
        rec.history.item.add(nested_key=[name], value_json=text)
    rec.history.step.SetInParent()
    return rec


def test_step_going_backwards_is_an_error(tmp_path):
    records = [_history(s, {"train/loss": "1.5"}, num=i + 1).SerializeToString()
               for i, s in enumerate([0, 1, 2, 1, 3])]
    path = tmp_path / "run-x.wandb"
    path.write_bytes(encode_log(records))
    with pytest.raises(GapwatchError, match=r"record 4: step 1 after step 2: W&B steps only grow"):
        parse_wandb_run(path)


def test_history_row_without_step_is_an_error(tmp_path):
    rec = wpb.Record(num=1)
    rec.history.item.add(nested_key=["train/loss"], value_json="1.0")
    path = tmp_path / "run-x.wandb"
    path.write_bytes(encode_log([rec.SerializeToString()]))
    with pytest.raises(GapwatchError, match="record 1: history row with no _step"):
        parse_wandb_run(path)


def test_folder_with_two_runs_must_name_one(rich_run, tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(find_run_file(rich_run), tmp_path / name / f"run-{name}.wandb")
    with pytest.raises(GapwatchError, match="holds 2 W&B runs"):
        load(tmp_path)


# --- the fast reader against wandb's own classes on every record shape ---------------------------
_names = st.text(alphabet="abcdefgh/_.-é", min_size=1, max_size=140).filter(
    lambda s: not s.startswith("_"))
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda x: "NaN" if math.isnan(x) else ("Infinity" if x == math.inf else
                                                "-Infinity" if x == -math.inf else repr(x))),
    st.integers(-10**12, 10**12).map(str),
    st.booleans().map(lambda b: "true" if b else "false"),
    st.text(max_size=200).map(lambda t: json.dumps(t)),
)


def _pad(num: int) -> bytes:
    """A record no importer reads (stats), long enough that every record before it is read by the
    fast path (the last few hundred bytes of a file go to the exact decoder)."""
    rec = wpb.Record(num=num, stats=wpb.StatsRecord())
    rec.stats.item.add(key="pad", value_json='"' + "p" * TAIL_MARGIN + '"')
    return rec.SerializeToString()


@st.composite
def _records(draw):
    out = []
    steps = sorted(draw(st.sets(st.integers(0, 10**6), min_size=1, max_size=25)))
    for i, step in enumerate(steps):
        rec = wpb.Record(num=i + 1)
        row = draw(st.dictionaries(_names, _values, max_size=6))
        for name, text in row.items():
            shape = draw(st.sampled_from(["nested", "parts", "key", "number", "integer"]))
            item = rec.history.item.add()
            if shape == "parts":
                item.nested_key.extend(name.split("/") if "/" in name else [name, "x"])
            elif shape == "key":
                item.key = name
            else:
                item.nested_key.append(name)
            if shape == "number" and text not in ("true", "false") and not text.startswith('"'):
                item.number = float(text)
            elif shape == "integer" and text.lstrip("-").isdigit():
                item.integer = int(text)
            else:
                item.value_json = text
        rec.history.item.add(nested_key=["_step"], value_json=str(step))
        if draw(st.booleans()):
            rec.history.step.SetInParent()
        if draw(st.booleans()):
            summ = wpb.Record(num=i + 1)
            summ.summary.update.add(nested_key=["_wandb", "runtime"], value_json="3")
            summ.summary.update.add(key="_runtime", value_json="3")
            out.append(summ.SerializeToString())
        if draw(st.booleans()):
            # wandb mirrors each logged row into the summary, items in any order.
            mirror = wpb.Record(num=i + 1)
            names = draw(st.permutations([*row, "_step"]))
            for name in names:
                mirror.summary.update.add(nested_key=[name], value_json=row.get(name, str(step)))
            out.append(mirror.SerializeToString())
        out.append(rec.SerializeToString())
        if draw(st.integers(0, 3)) == 0:
            # run.summary[...] set or deleted by hand, possibly a name logged before.
            summ = wpb.Record(num=i + 1)
            name = draw(st.sampled_from([*row, "final/score"]) if row else st.just("final/s"))
            if draw(st.booleans()):
                summ.summary.update.add(key=name, value_json=draw(_values))
            else:
                summ.summary.remove.add(nested_key=[name])
            out.append(summ.SerializeToString())
        if draw(st.booleans()):
            out.append(wpb.Record(num=i + 1, stats=wpb.StatsRecord()).SerializeToString())
        if draw(st.integers(0, 9)) == 0:
            out.append(b"x" * draw(st.integers(1, 3 * BLOCK_SIZE)))  # split over blocks
            out[-1] = wpb.Record(
                num=i + 1, output_raw=wpb.OutputRawRecord(line="y" * len(out[-1]))
            ).SerializeToString()
    out.append(_pad(len(steps) + 1))
    return out


def _wandb_summary(path) -> dict:
    """The run's summary as wandb's own Record class reads it: every summary record's updates and
    removals in file order (W&B's own `_` keys left out, as the reader does)."""
    buf = path.read_bytes()
    found = read_records(buf, str(path))
    summary = {}
    for i in range(found.count):
        rec = wpb.Record()
        rec.ParseFromString(found.payload(buf, i))
        if rec.WhichOneof("record_type") != "summary":
            continue
        for item in rec.summary.update:
            summary[".".join(item.nested_key) or item.key] = item.value_json
        for item in rec.summary.remove:
            summary.pop(".".join(item.nested_key) or item.key, None)
    return {k: v for k, v in summary.items() if not k.startswith("_")}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_records())
def test_fast_reader_equals_wandbs_classes(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("h") / "run-h.wandb"
    path.write_bytes(encode_log(records))
    reader = WandbRunReader(path)
    run = to_imported(reader, reader.read())
    rows, _ = _exact_rows(path)
    expected = {}
    for key, text in rows.items():
        value = json.loads(text)
        if isinstance(value, (bool, int, float)):
            expected[key] = float(value)
    got = {(int(s), str(k)): v for s, k, v in
           zip(run.scalars["step"], run.scalars["key"], run.scalars["value"])}
    assert got.keys() == expected.keys()
    for key in expected:
        a, b = got[key], expected[key]
        assert a == b or (math.isnan(a) and math.isnan(b)), key
    # The summary: folded from the last update of each name, it equals the full fold.
    summary = _wandb_summary(path)
    assert reader.summary == summary
    public = {k: json.loads(v) for k, v in summary.items()}
    assert run.summary == {k: v for k, v in public.items() if isinstance(v, (int, float, bool))
                           or (isinstance(v, str) and len(v) <= 200)}


def test_plain_records_take_the_fast_path(tmp_path):
    records = []
    for s in range(150):  # 300 records in one 32 KiB block: none split over blocks
        items = {"train/loss": repr(1.0 / (s + 1)), "optim/lr": "0.0003"}
        mirror = wpb.Record(num=2 * s + 1)
        for name, text in {**items, "_step": str(s)}.items():
            mirror.summary.update.add(nested_key=[name], value_json=text)
        records += [mirror.SerializeToString(),
                    _history(s, items, num=2 * s + 2).SerializeToString()]
    path = tmp_path / "run-x.wandb"
    raw = encode_log([*records, _pad(301)])
    assert len(raw) < BLOCK_SIZE
    path.write_bytes(raw)
    reader = WandbRunReader(path)
    assert len(reader.read()) == 300
    assert reader.exact_records == 1  # the pad, at the end of the file: nothing else
    assert reader.summary == {"train/loss": repr(1 / 150), "optim/lr": "0.0003"}


def test_records_split_over_blocks(tmp_path):
    records = [_history(s, {"train/loss": repr(1.0 / (s + 1)), "note/pad": '"' + "p" * 900 + '"'},
                        num=s + 1).SerializeToString() for s in range(200)]
    raw = encode_log([*records, _pad(201)])
    found = read_records(raw, "x")
    assert found.split, "expected records split over block boundaries"
    path = tmp_path / "run-x.wandb"
    path.write_bytes(raw)
    reader = WandbRunReader(path)
    data = to_imported(reader, reader.read()).to_run_data("x")
    assert len(data.series("train/loss")) == 200
    assert data.series("train/loss").loc[199] == pytest.approx(1 / 200)
    # Split records are joined and read by the fast path too: only the pad at the end is not.
    assert reader.exact_records == 1


def test_a_name_given_twice_in_a_row_keeps_its_last_value(tmp_path):
    records = []
    for s in range(3):
        rec = _history(s, {f"wide/{i}": str(i) for i in range(70 * (s == 2))}, num=s + 1)
        rec.history.item.add(key="x", value_json="1")
        rec.history.item.add(nested_key=["x"], value_json=str(10 + s))  # the same name, later
        rec.history.item.add(key="a.b", value_json="5")
        rec.history.item.add(nested_key=["a", "b"], value_json='"text"')  # flattens to a.b
        records.append(rec.SerializeToString())
    path = tmp_path / "run-x.wandb"
    path.write_bytes(encode_log([*records, _pad(4)]))
    reader = WandbRunReader(path)
    run = to_imported(reader, reader.read())
    data = run.to_run_data("x")
    assert data.series("x").to_dict() == {0: 10.0, 1: 11.0, 2: 12.0}
    assert "a.b" not in set(run.scalars["key"])  # its last value is text: not a number
    assert data.series("wide/69").to_dict() == {2: 69.0}


def _rows_of(path):
    reader = WandbRunReader(path)
    rows = reader.read()
    return reader, [(int(s), reader.key_names[k], v) for s, k, v in
                    zip(rows.step, rows.key, rows.value)]


def test_segments_of_one_block_read_as_the_whole_file(tmp_path, monkeypatch):
    records = []
    for s in range(300):
        pad = "p" * (2000 if s % 50 else 3 * BLOCK_SIZE)  # some records longer than a segment
        records.append(_history(s, {"train/loss": repr(1 / (s + 1)), "note": f'"{pad}"'},
                                num=s + 1).SerializeToString())
    path = tmp_path / "run-x.wandb"
    path.write_bytes(encode_log([*records, _pad(301)]))
    whole, expected = _rows_of(path)
    monkeypatch.setattr(log_format, "SEGMENT_BLOCKS", 1)
    segmented, got = _rows_of(path)
    assert got == expected and len(got) == 300
    assert (segmented.records, segmented.offset, segmented.summary) == (
        whole.records, whole.offset, whole.summary)


def test_a_failed_read_leaves_the_reader_as_it_was(tmp_path, monkeypatch):
    records = [_history(s, {"train/loss": "1.5", "note": '"' + "p" * 3000 + '"'},
                        num=s + 1).SerializeToString() for s in range(60)]
    raw = bytearray(encode_log([*records, _pad(61)]))
    found = read_records(bytes(raw), "x")
    raw[int(found.starts[50]) + 3] ^= 0xFF  # damage late in the file
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(raw))
    monkeypatch.setattr(log_format, "SEGMENT_BLOCKS", 1)  # earlier segments decode first
    reader = WandbRunReader(path)
    with pytest.raises(GapwatchError, match="record 51 at byte .*: checksum mismatch"):
        reader.read(follow=True)
    assert (reader.records, reader.offset, reader.last_step, reader.rows, reader.key_names,
            reader.summary) == (0, len(FILE_HEADER), None, 0, [], {})


@pytest.mark.parametrize("name, value", [(b"train/loss", b'"\xff"'), (b"train/\xfe", b"1.0")])
def test_text_that_is_not_utf8_is_an_error_naming_the_record(tmp_path, name, value):
    def field(tag: bytes, data: bytes) -> bytes:
        return tag + bytes([len(data)]) + data

    item = field(b"\x12", name) + field(b"\x82\x01", value)
    step = field(b"\x12", b"_step") + field(b"\x82\x01", b"1")
    body = field(b"\x0a", item) + field(b"\x0a", step)
    damaged = b"\x08\x02" + field(b"\x12", body)  # written by hand: protobuf refuses such text
    ok = _history(0, {"train/loss": "1.0"}, num=1).SerializeToString()
    path = tmp_path / "run-x.wandb"
    path.write_bytes(encode_log([ok, damaged, _pad(3)]))
    with pytest.raises(GapwatchError, match=r"record 2: not a W&B record \(text that is not UTF-8"):
        parse_wandb_run(path)


def _run_without_exit(path, steps=5):
    records = []
    for step in range(steps):
        rec = wpb.Record(num=step + 1)
        rec.history.item.add(key="_step", value_json=str(step))
        rec.history.item.add(key="train/loss", value_json=str(4.0 - step / 10))
        records.append(rec.SerializeToString())
    path.write_bytes(encode_log(records))
    return path


@pytest.mark.parametrize("age_s, status", [(30, "running"), (3 * 3600, "crashed")])
def test_no_exit_record_is_crashed_once_the_file_is_stale(tmp_path, sqlite_url, capsys, age_s,
                                                          status):
    """A file without an exit record that ends between chunks: a live run if written lately,
    a crashed one if not (its process died between two writes)."""
    src = _run_without_exit(tmp_path / "run-x.wandb")
    written = time.time() - age_s
    os.utime(src, (written, written))
    assert main(["import", str(src), "--run", "r", "--store", sqlite_url]) == 0
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    with open_store(sqlite_url) as store:
        assert store.get_run("r")["status"] == status
        assert len(store.load_run("r").series(schema.TRAIN_LOSS)) == 5
    if status == "crashed":
        assert ("warning: " + str(src) + ": crashed: no exit record and not written for 3 h") in err
        assert "imported its 5 complete records" in err
        assert err.endswith("crashed (what was complete is imported)")
    else:
        assert "warning:" not in err and "taken as still running" in err
        assert err.endswith("still running")
