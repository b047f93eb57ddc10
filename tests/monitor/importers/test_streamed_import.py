"""JSONL and CSV logs imported chunk by chunk store exactly what the whole-file path stores."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import import_source, load, table_import, table_stream
from monitor.importers.imported_run import scalars_frame
from monitor.importers.normalize import TokensPerStep
from monitor.importers.store_writer import import_state, write_run
from monitor.importers.table_stream import TableStream
from monitor.store import open_store

STEPS = 3_000


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 1,000 rows and JSONL blocks of 16 KB: a 3,000-step log is many of each."""
    monkeypatch.setattr(table_stream, "CHUNK_ROWS", 1_000)
    monkeypatch.setattr(table_stream, "BLOCK_BYTES", 16 << 10)


def _objects(steps: int = STEPS):
    """A log with what real ones have: dense train metrics, sparse evals, a restart that logs
    steps again, a step logged on two lines, NaN and Inf, a text value and a nested object."""
    out = []
    step = 0
    for i in range(steps):
        step += 1
        if i == 2_000:
            step -= 300  # resumed from a checkpoint
        obj = {"step": step, "train/loss": 3.0 - i / steps, "train/tokens": step * 4096,
               "optim/lr": 1e-4, "perf/mfu": 0.4 + (i % 7) / 100}
        if step % 100 == 0:
            obj["eval/heldout/c4/loss"] = 2.9 - i / steps
        if i % 500 == 0:
            obj["data/cursor"] = 2**60 + 1  # beyond float precision: rounds as float() does
        if i == 1_234:
            obj["train/loss"] = float("nan")
            obj["train/grad_norm"] = float("inf")
        out.append(obj)
        if i == 700:
            out.append({"step": step, "train/loss": 1.5})  # the same step again: the last wins
    return out


def _jsonl(path, objects, nested_line: int | None = 1_500):
    lines = []
    for i, obj in enumerate(objects):
        if i == nested_line:
            obj = {**obj, "data": {"epoch": 0.0}, "note": "text"}
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n")
    return path


def _csv(path, objects):
    frame = pd.DataFrame(objects)
    frame.to_csv(path, index=False, na_rep="")
    return path


def _stored(store, name):
    data = store.load_run(name)
    run = {k: v for k, v in store.get_run(name).items()
           if k not in ("id", "created_at", "updated_at")}
    state = {k: v for k, v in import_state(store, name).items() if k != "updated_at"}
    return data, run, state


def _assert_same_run(a, b):
    data_a, run_a, state_a = a
    data_b, run_b, state_b = b
    assert run_a == run_b
    assert state_a == state_b
    pd.testing.assert_frame_equal(data_a.scalars, data_b.scalars)
    pd.testing.assert_frame_equal(data_a.repeats.reset_index(drop=True),
                                  data_b.repeats.reset_index(drop=True))
    cols = ["step", "kind", "attempt"]
    pd.testing.assert_frame_equal(data_a.events[cols].reset_index(drop=True),
                                  data_b.events[cols].reset_index(drop=True))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_streamed_import_stores_what_the_whole_file_path_stores(store_url, tmp_path, fmt):
    objects = _objects()
    path = _jsonl(tmp_path / "m.jsonl", objects) if fmt == "jsonl" else _csv(tmp_path / "m.csv",
                                                                              objects)
    store = open_store(store_url)
    whole = write_run(store, "whole", load(path))
    streamed, summary = import_source(store, "streamed", path)
    assert (streamed.rows_new, streamed.rows_total, streamed.events) == (
        whole.rows_new, whole.rows_total, whole.events)
    assert streamed.created and summary.profile == "gapwatch"
    assert any("last value wins" in n for n in summary.notes)
    # Under another name the runs must be equal in everything but their name.
    a, b = _stored(store, "whole"), _stored(store, "streamed")
    a[1].pop("name"), b[1].pop("name")
    _assert_same_run(a, b)
    data = b[0]
    assert store.run_info("streamed").tokens_per_step == 4096.0
    assert data.series(schema.TRAIN_LOSS).loc[701] == 1.5
    if fmt == "jsonl":  # a CSV written by pandas cannot tell NaN from an empty cell
        assert math.isnan(data.series(schema.TRAIN_LOSS).loc[1_235])
    assert (data.events["kind"] == "restart").sum() == 1
    assert store.get_run("streamed")["attempts"] == 2
    # Importing it again is a no-op, as it is for the whole-file path.
    again, _ = import_source(store, "streamed", path)
    assert (again.rows_new, again.created) == (0, False)
    assert _stored(store, "streamed")[2] == b[2]
    store.close()


def test_the_fast_and_the_line_by_line_reading_agree(tmp_path, monkeypatch):
    path = _jsonl(tmp_path / "m.jsonl", _objects())
    used = {"fast": 0, "exact": 0}
    fast = TableStream._flat_jsonl

    def counting(self, block, first_line, lines):
        got = fast(self, block, first_line, lines)
        used["fast" if got is not None else "exact"] += 1
        return got

    monkeypatch.setattr(TableStream, "_flat_jsonl", counting)
    mixed = TableStream(path, "jsonl").collect()
    assert used["fast"] > 10 and used["exact"] >= 1  # both paths ran
    monkeypatch.setattr(TableStream, "_flat_jsonl", lambda self, block, first_line, lines: None)
    exact = TableStream(path, "jsonl").collect()
    pd.testing.assert_frame_equal(mixed.scalars, exact.scalars)
    assert mixed.events == exact.events and mixed.notes == exact.notes

    csv_path = _csv(tmp_path / "m.csv", _objects())
    quick = TableStream(csv_path, "csv").collect()
    monkeypatch.setattr(TableStream, "_plain_csv", lambda self, table, first_line: None)
    slow = TableStream(csv_path, "csv").collect()
    pd.testing.assert_frame_equal(quick.scalars, slow.scalars)
    assert quick.events == slow.events and quick.notes == slow.notes


@pytest.mark.parametrize("blank_first", [True, False])
def test_a_csv_that_pyarrow_stops_reading_midway_is_read_on_by_pandas_from_the_same_row(tmp_path, monkeypatch,
                                                                                        blank_first):
    monkeypatch.setattr(table_stream, "CSV_BLOCK_BYTES", 16 << 10)
    lines = _csv(tmp_path / "m.csv", _objects()).read_text().splitlines(keepends=True)
    # A blank line and a row one cell short (either first), well past the first blocks pyarrow reads.
    blank, short = (2_500, 2_700) if blank_first else (2_700, 2_500)
    lines[short] = lines[short].rstrip("\n").rsplit(",", 1)[0] + "\n"
    lines.insert(blank, "\n")
    path = tmp_path / "odd.csv"
    path.write_text("".join(lines))
    used = []
    monkeypatch.setattr(TableStream, "_pandas_csv_blocks",
                        lambda self, width, skip, named, f=TableStream._pandas_csv_blocks:
                        used.append(skip) or f(self, width, skip, named))
    both = TableStream(path, "csv").collect()
    assert used and 0 < used[0] < 2_500  # pyarrow read the first rows, pandas the rest
    monkeypatch.setattr(table_stream, "_arrow_reads", lambda path, header: False)
    pandas_only = TableStream(path, "csv").collect()
    pd.testing.assert_frame_equal(both.scalars, pandas_only.scalars)
    assert both.events == pandas_only.events and both.notes == pandas_only.notes


def test_a_grown_log_adds_only_its_new_rows_and_a_changed_one_is_refused(sqlite_url, tmp_path):
    objects = _objects()
    path = _jsonl(tmp_path / "m.jsonl", objects[:1_800], nested_line=None)
    store = open_store(sqlite_url)
    first, _ = import_source(store, "r", path)
    _jsonl(path, objects, nested_line=None)
    grown, _ = import_source(store, "r", path)
    assert grown.rows_total == len(load(path).scalars)
    assert grown.rows_new == grown.rows_total - first.rows_total > 0
    reference = write_run(store, "whole", load(path))
    assert reference.rows_total == grown.rows_total
    a, b = _stored(store, "whole"), _stored(store, "r")
    assert a[2]["fingerprint"] == b[2]["fingerprint"]
    pd.testing.assert_frame_equal(a[0].scalars, b[0].scalars)
    # A row far into the file, imported already, changes: refused, nothing written.
    objects[2_500]["perf/mfu"] = 9.0
    _jsonl(path, objects, nested_line=None)
    with pytest.raises(GapwatchError, match="rows imported into run 'r' before have changed"):
        import_source(store, "r", path)
    assert _stored(store, "r")[2] == b[2]
    store.close()


@pytest.mark.parametrize("fmt, bad, message", [
    ("jsonl", '{"step": 2501, "train/loss": ', "line 2502: not valid JSON"),
    ("jsonl", '{"step": NaN, "train/loss": 1.0}', "line 2502: step nan is not a whole number"),
    ("csv", "2501,abc,,,,,", "line 2503: column 'train/loss': 'abc' is not a number"),
])
def test_a_bad_line_far_into_the_file_is_one_error_and_keeps_what_was_imported(
        sqlite_url, tmp_path, fmt, bad, message):
    objects = _objects(2_500)
    path = (_jsonl(tmp_path / "m.jsonl", objects, nested_line=None) if fmt == "jsonl"
            else _csv(tmp_path / "m.csv", objects))
    store = open_store(sqlite_url)
    import_source(store, "r", path)
    before = _stored(store, "r")
    with path.open("a") as fh:
        fh.write(bad + "\n" + path.read_text().splitlines()[-1] + "\n")
    with pytest.raises(GapwatchError, match=message):
        import_source(store, "r", path)
    _assert_same_run(before, _stored(store, "r"))
    # Into a new run: nothing of it is left behind.
    with pytest.raises(GapwatchError, match=message):
        import_source(store, "fresh", path)
    assert store.get_run("fresh") is None
    store.close()


@pytest.mark.parametrize("later", [
    {"train/CE loss": 3.0, "optim/total_grad_norm": 1.0},
    # Under the first chunks' profile (gapwatch) these two would both be train/ce_loss.
    {"train/CE loss": 3.0, "train/ce_loss": 2.0, "optim/total_grad_norm": 1.0},
])
def test_the_profile_is_the_one_all_names_choose(sqlite_url, tmp_path, later, monkeypatch):
    # The first chunks hold only a name both profiles know; the OLMo names come later.
    objects = [{"step": s, "optim/lr": 1e-4} for s in range(1, 3_001)]
    objects += [{"step": s, "optim/lr": 1e-4, **later} for s in range(3_001, 3_201)]
    path = _jsonl(tmp_path / "olmo.jsonl", objects, nested_line=None)
    store = open_store(sqlite_url)
    whole = load(path)
    assert whole.profile == "olmo"
    write_run(store, "whole", whole)
    passes = []
    once = table_import._import_once
    monkeypatch.setattr(table_import, "_import_once", lambda **kw: passes.append(kw["fixed"])
                        or once(**kw))
    _, summary = import_source(store, "streamed", path)
    assert summary.profile == "olmo"
    assert [p.name if p else None for p in passes] == [None, "olmo"]  # redone with all names' choice
    a, b = _stored(store, "whole"), _stored(store, "streamed")
    assert b[0].series(schema.TRAIN_LOSS).index.min() == 3_001
    pd.testing.assert_frame_equal(a[0].scalars, b[0].scalars)
    assert a[2] == b[2]
    store.close()


def test_two_names_onto_one_key_is_the_same_error_as_before(sqlite_url, tmp_path):
    objects = [{"step": s, "train/loss": 3.0} for s in range(1, 3_001)]
    objects += [{"step": s, "train/loss": 3.0, "extra/a b": 1.0, "extra/a_b": 2.0}
                for s in range(3_001, 3_201)]
    path = _jsonl(tmp_path / "clash.jsonl", objects, nested_line=None)
    with pytest.raises(GapwatchError, match="maps both") as whole:
        load(path)
    store = open_store(sqlite_url)
    with pytest.raises(GapwatchError, match="maps both") as streamed:
        import_source(store, "r", path)
    assert str(streamed.value) == str(whole.value)
    assert store.get_run("r") is None
    store.close()


def whole_run_tokens_per_step(scalars: pd.DataFrame) -> float | None:
    """The answer from every `train/tokens` row at once: the median step-to-step rate, when
    every rate lies within float rounding of it."""
    tok = scalars[scalars["key"] == schema.TRAIN_TOKENS]
    steps, values = tok["step"].to_numpy(dtype="float64"), tok["value"].to_numpy(dtype="float64")
    ds, dv = np.diff(steps), np.diff(values)
    rates = dv[ds > 0] / ds[ds > 0]
    if not len(rates):
        return None
    rate = float(np.median(rates))
    return rate if rate > 0 and np.allclose(rates, rate, rtol=1e-6) else None


@pytest.mark.parametrize("case", ["constant", "rounding", "noisy", "changes", "nan", "flat"])
def test_tokens_per_step_from_chunks_is_the_whole_run_answer(case):
    rng = np.random.default_rng(0)
    s = np.arange(1, 5_001)
    tokens = {
        "constant": s * 4096.0,
        "rounding": s * 4096.0 * (1 + 1e-13 * rng.normal(size=s.size)),
        "noisy": s * 4096.0 * (1 + 1e-5 * rng.normal(size=s.size)),
        "changes": np.where(s > 2_500, s * 8192.0, s * 4096.0),
        "nan": np.where(s == 100, np.nan, s * 3.0),
        "flat": np.full(s.size, 5.0),
    }[case]
    steps = np.r_[s[:3_000], s[2_000:4_000]]  # with a restart that logs steps again
    values = np.r_[tokens[:3_000], tokens[2_000:4_000]]
    rows = scalars_frame(steps, [schema.TRAIN_TOKENS] * len(steps), values)
    fed = TokensPerStep()
    for lo in range(0, len(rows), 777):
        fed.add(rows.iloc[lo:lo + 777])
    assert fed.result({}) == whole_run_tokens_per_step(rows)
    if case in ("constant", "rounding"):
        assert fed.result({}) == pytest.approx(4096.0)


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_windows_and_old_mac_line_ends_read_as_they_did(tmp_path, newline):
    objects = _objects()
    plain = _jsonl(tmp_path / "plain.jsonl", objects)
    other = tmp_path / "other.jsonl"
    other.write_bytes(plain.read_bytes().replace(b"\n", newline.encode()))
    a, b = load(plain), load(other)
    pd.testing.assert_frame_equal(a.scalars, b.scalars)
    assert a.events == b.events and len(a.notes) == len(b.notes)


def test_tokens_per_step_from_a_single_token_count():
    """A run (one cut short, say) with one cumulative token count: no rate between two counts
    to take tokens per step from, so none is taken (this once raised ValueError)."""
    tokens = TokensPerStep()
    one_row = pd.DataFrame({"step": [10], "key": [schema.TRAIN_TOKENS], "value": [4096.0],
                            "attempt": [1]})
    tokens.add(one_row)
    assert tokens.result({}) is None
    tokens.add(one_row.assign(step=20, value=8192.0))
    assert tokens.result({}) == 409.6
