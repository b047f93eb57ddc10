"""Property tests of each parser: any input ends in the values it holds, or in one GapwatchError.

Logs drawn by hypothesis are read back exactly (NaN and infinities written as such included);
arbitrary bytes and documents never raise anything but GapwatchError, and whatever they import
is a number they hold.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz_corpus import numbers_in_json
from monitor.errors import GapwatchError
from monitor.importers.generic_table import parse_generic_csv, parse_jsonl
from monitor.importers.lm_eval_json import parse_lm_eval
from monitor.importers.text_logs import parse_text_log
from monitor.importers.wandb.csv_export import parse_wandb_csv
from monitor.importers.wandb.run_file import parse_wandb_run
from monitor.schema import MAX_STEP

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NAMES = st.sampled_from(["train/loss", "train/grad_norm", "optim/lr", "perf/mfu", "eval/heldout/c4/loss"])
VALUES = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def logs(draw):
    """(step, {name: value}) rows with growing steps."""
    gaps = draw(st.lists(st.integers(min_value=1, max_value=2**40), min_size=1, max_size=30))
    first = draw(st.integers(min_value=0, max_value=MAX_STEP - sum(gaps)))
    rows, step = [], first
    for gap in gaps:
        rows.append((step, draw(st.dictionaries(NAMES, VALUES, min_size=1, max_size=5))))
        step += gap
    return rows


def rows_of(run) -> dict[tuple[int, str], float]:
    frame = run.scalars
    return {(int(s), str(k)): float(v) for s, k, v in zip(frame["step"], frame["key"], frame["value"])}


def same(got: dict, expected: dict) -> bool:
    return got.keys() == expected.keys() and all(
        got[k] == expected[k] or (math.isnan(got[k]) and math.isnan(expected[k])) for k in expected)


def csv_cell(value: float) -> str:
    return repr(value) if math.isfinite(value) else str(value)


@SETTINGS
@given(rows=logs())
def test_a_jsonl_log_is_read_back_exactly(tmp_path, rows):
    path = tmp_path / "log.jsonl"
    # json.dumps writes NaN and Infinity as such, as Python trainers do.
    path.write_text("".join(json.dumps({"step": s, **v}) + "\n" for s, v in rows))
    assert same(rows_of(parse_jsonl(path)), {(s, k): v for s, vals in rows for k, v in vals.items()})


@SETTINGS
@given(rows=logs())
def test_a_csv_log_is_read_back_exactly(tmp_path, rows):
    names = sorted({k for _, v in rows for k in v})
    path = tmp_path / "log.csv"
    path.write_text("step," + ",".join(names) + "\n" + "".join(
        f"{s}," + ",".join(csv_cell(v[n]) if n in v else "" for n in names) + "\n" for s, v in rows))
    assert same(rows_of(parse_generic_csv(path)), {(s, k): v for s, vals in rows for k, v in vals.items()})


@SETTINGS
@given(rows=logs())
def test_a_wandb_csv_export_is_read_back_exactly(tmp_path, rows):
    names = sorted({k for _, v in rows for k in v})
    path = tmp_path / "export.csv"
    path.write_text("_step," + ",".join(names) + "\n" + "".join(
        f"{s}," + ",".join(csv_cell(v[n]) if n in v else "" for n in names) + "\n" for s, v in rows))
    assert same(rows_of(parse_wandb_csv(path)), {(s, k): v for s, vals in rows for k, v in vals.items()})


JSON = st.recursive(st.none() | st.booleans() | st.integers() | VALUES | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)


@SETTINGS
@given(results=st.dictionaries(st.text(min_size=1, max_size=12), JSON, min_size=1, max_size=4),
       extra=st.dictionaries(st.sampled_from(["config", "n-samples", "versions"]), JSON, max_size=3))
def test_lm_eval_documents_of_any_shape(tmp_path, results, extra):
    doc = {"results": results, "config": {"model_args": "revision=step7"}, **extra}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    try:
        run = parse_lm_eval(path, step=7)
    except GapwatchError as exc:
        assert "\n" not in str(exc)
        return
    numbers: set[float] = set()
    numbers_in_json(doc, numbers)
    assert all(v in numbers or (math.isnan(v) and any(math.isnan(n) for n in numbers))
               for v in run.scalars["value"])


PARSERS = {
    "log.jsonl": parse_jsonl, "log.csv": parse_generic_csv, "export.csv": parse_wandb_csv,
    "results.json": lambda p: parse_lm_eval(p, step=1), "train.log": parse_text_log,
}


@pytest.mark.parametrize("filename", PARSERS)
@SETTINGS
@given(data=st.binary(max_size=400) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bytes_end_in_a_gapwatch_error_or_an_import(tmp_path, filename, data):
    path = tmp_path / filename
    path.write_bytes(data)
    try:
        PARSERS[filename](path)
    except GapwatchError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)


@pytest.fixture(scope="module")
def small_wandb_run():
    from bench.fuzz_corpus import WILD

    (path,) = (WILD / "wandb" / "14_nanogpt_muon_2026").rglob("*.wandb")
    data = path.read_bytes()
    run = parse_wandb_run(path)
    return data, set(rows_of(run).items()), set(run.notes)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spots=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.none() | st.floats(0, 1))
def test_a_damaged_wandb_file_imports_only_what_it_holds(tmp_path, small_wandb_run, spots, cut):
    original, rows, notes = small_wandb_run
    data = bytearray(original)
    for where, byte in spots:
        data[int(where * len(data))] = byte
    if cut is not None:
        data = data[:max(1, int(cut * len(data)))]
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    try:
        run = parse_wandb_run(path)
    except GapwatchError as exc:
        assert "\n" not in str(exc)
        return
    got = set(rows_of(run).items())
    assert {r for r in got if not math.isnan(r[1])} <= rows
    assert len(got) == len(rows) or set(run.notes) - notes  # fewer rows only with a note of it
