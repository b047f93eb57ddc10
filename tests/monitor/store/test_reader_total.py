"""The reader is total: every point budget of at least one, every series shape, no exception, and
tsdownsample only ever gets what it can take (its MinMax panics, a BaseException, on fewer than two
buckets, and silently returns nothing on unsorted steps)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tsdownsample import MinMaxDownsampler

from monitor.store import open_store, reader

KEY = "train/tokens"
_names = itertools.count()


class CheckedMinMax:
    """tsdownsample's MinMax, with its preconditions asserted on every call."""

    calls = 0

    def downsample(self, x, y, n_out):
        CheckedMinMax.calls += 1
        assert n_out >= 4 and n_out % 2 == 0, n_out
        assert len(x) == len(y) > n_out
        assert np.all(np.diff(x) > 0), "steps must be strictly increasing"
        assert np.isfinite(y).all()
        return MinMaxDownsampler().downsample(x, y, n_out=n_out)


@pytest.fixture
def store(sqlite_url, monkeypatch):
    monkeypatch.setattr(reader, "MinMaxDownsampler", CheckedMinMax)
    with open_store(sqlite_url) as s:
        yield s


finite = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)
odd = st.sampled_from([float("nan"), float("inf"), float("-inf")])


@st.composite
def series(draw):
    """(steps, values) of one series in the order they are written: empty, one point, constant,
    NaN-only, huge gaps, shuffled steps, or a mix, up to a few hundred rows (past the raw-read
    limit of small budgets, so rollups are read and thinned too)."""
    shape = draw(st.sampled_from(["empty", "one", "constant", "nan_only", "gaps", "shuffled", "mixed"]))
    n = {"empty": 0, "one": 1}.get(shape, draw(st.integers(2, 400)))
    if shape == "gaps":
        steps = np.cumsum(draw(st.lists(st.sampled_from([1, 2, 1000, 10**6, 10**10]), min_size=n, max_size=n)))
    else:
        steps = np.arange(n) + draw(st.integers(0, 10**6))
    if shape == "constant":
        values = np.full(n, draw(finite))
    elif shape == "nan_only":
        values = np.full(n, np.nan)
    elif shape == "mixed":
        values = np.array(draw(st.lists(st.one_of(finite, odd), min_size=n, max_size=n)), dtype=float)
    else:
        values = np.cumsum(np.array(draw(st.lists(finite, min_size=n, max_size=n)), dtype=float))
    if shape in ("shuffled", "mixed"):
        order = np.random.default_rng(draw(st.integers(0, 1000))).permutation(n)
        steps, values = steps[order], values[order]
    return np.asarray(steps, dtype=np.int64), values


budgets = st.one_of(st.integers(1, 12), st.integers(13, 3000))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=series(), max_points=budgets, ranged=st.booleans())
def test_read_scalars_is_total(store, data, max_points, ranged):
    steps, values = data
    run = f"r{next(_names)}"
    store.ensure_run(run)
    # Written in two batches in the drawn order: a late batch may land before steps already stored.
    half = len(steps) // 2
    for part in (slice(0, half), slice(half, None)):
        if len(steps[part]):
            store.write_metrics(run, pd.DataFrame({"step": steps[part], "key": KEY, "value": values[part]}))
    order = np.argsort(steps, kind="stable")
    logged = pd.Series(values[order], index=steps[order])
    step_range = None
    if ranged and len(steps):
        lo, hi = sorted(np.random.default_rng(len(steps)).choice(steps, 2))
        step_range = (int(lo), int(hi))
        logged = logged[(logged.index >= lo) & (logged.index <= hi)]

    read = store.read_series(run, [KEY], step_range=step_range, max_points=max_points)
    got = read.rows

    assert len(got) <= max_points
    if got.empty:
        assert not np.isfinite(logged.to_numpy()).any() or len(logged) == 0
        return
    out_steps, out_values = got["step"].to_numpy(), got["value"].to_numpy()
    assert np.all(np.diff(out_steps) > 0)
    # Every point is a logged one: the same step with the same value (NaN as NaN).
    np.testing.assert_array_equal(logged.loc[out_steps].to_numpy(), out_values)
    width = read.bucket_width[(run, KEY)]
    if width == 1:
        assert len(got) == len(logged)  # everything, as logged
        return
    good = logged[np.isfinite(logged.to_numpy())]
    assert np.isfinite(out_values).all()
    assert out_steps[-1] == good.index[-1]  # ends at the last finite value
    if max_points >= 3 and step_range is None:
        # (A range's edge rollup buckets keep only their extremes that fall inside it.)
        assert out_values.min() == good.min() and out_values.max() == good.max()


@pytest.mark.parametrize("max_points", [1, 2, 3, 4, 5])
def test_a_cumulative_count_read_at_tiny_budgets(store, max_points):
    """The runs overview's read of a token count that grows but not linearly (packed batches):
    a 300k-step series thinned to a handful of points once panicked inside tsdownsample."""
    rng = np.random.default_rng(0)
    steps = np.arange(300_000)
    tokens = np.cumsum(rng.integers(3000, 4097, len(steps))).astype(float)
    store.ensure_run("packed")
    store.write_metrics("packed", pd.DataFrame({"step": steps, "key": KEY, "value": tokens}))
    got = store.read_scalars("packed", [KEY], max_points=max_points)
    assert 1 <= len(got) <= max_points
    assert got["value"].max() == tokens[-1]
    assert got["step"].iloc[-1] == steps[-1]


def test_a_budget_below_one_point_is_refused(store):
    store.ensure_run("r")
    with pytest.raises(ValueError, match="at least 1"):
        store.read_scalars("r", [KEY], max_points=0)


def test_a_sparse_series_is_read_from_its_rollups_exactly(store, monkeypatch):
    """Evals every few thousand steps: every point comes back as logged (the latest attempt of a
    step logged twice), without decoding the chunks the range spans."""
    steps = np.arange(0, 200_000, 2500)
    values = np.linspace(0.3, 0.6, len(steps))
    store.ensure_run("evals")
    store.write_metrics("evals", pd.DataFrame({"step": steps, "key": KEY, "value": values}))
    store.write_metrics("evals", pd.DataFrame({"step": [5000], "key": KEY, "value": [0.9], "attempt": [2]}))
    values[2] = 0.9
    store.write_metrics("evals", pd.DataFrame({"step": [100_001], "key": "train/loss", "value": [1.0]}))

    def no_raw(*_args, **_kwargs):
        raise AssertionError("read raw rows")

    monkeypatch.setattr(reader.metric_rows, "series_rows", no_raw)
    read = store.read_series("evals", [KEY], max_points=2000)
    got = read.rows
    np.testing.assert_array_equal(got["step"], steps)
    np.testing.assert_array_equal(got["value"], values)
    assert read.bucket_width[("evals", KEY)] == 1
    part = store.read_scalars("evals", [KEY], step_range=(2500, 10_000), max_points=2000)
    assert part["step"].tolist() == [2500, 5000, 7500, 10_000]


def test_sparse_series_of_different_spans_read_together_each_come_back_exactly(store, monkeypatch):
    """A run page reads every eval series of a run at once (one query of their rollups): each
    keeps its own steps, however the others' spans and cadences differ, and a series that cannot
    be read from rollups (a NaN) is read raw without taking the others with it."""
    store.ensure_run("evals")
    logged = {"eval/a": np.arange(10_000, 300_000, 2500), "eval/b": np.arange(0, 120_000, 4000),
              "eval/c": np.arange(150_000, 400_000, 5000)}
    values = {k: np.linspace(1.0, 2.0, len(s)) + i for i, (k, s) in enumerate(logged.items())}
    values["eval/c"][3] = np.nan
    for key, steps in logged.items():
        store.write_metrics("evals", pd.DataFrame({"step": steps, "key": key, "value": values[key]}))
    raw_reads = []
    real = reader.metric_rows.series_rows
    monkeypatch.setattr(reader.metric_rows, "series_rows", lambda conn, run_id, key_id, *a: raw_reads.append(key_id)
                        or real(conn, run_id, key_id, *a))
    for step_range in (None, (100_000, 200_000)):
        got = store.read_scalars("evals", list(logged), step_range=step_range, max_points=2000)
        for key, steps in logged.items():
            keep = np.ones(len(steps), bool) if step_range is None else \
                (steps >= step_range[0]) & (steps <= step_range[1])
            mine = got[got["key"] == key]
            np.testing.assert_array_equal(mine["step"], steps[keep])
            np.testing.assert_array_equal(mine["value"], values[key][keep])
    assert len(raw_reads) == 2 and len(set(raw_reads)) == 1  # eval/c, once a read


def test_a_sparse_series_with_three_points_in_a_bucket_or_a_nan_is_read_raw(store):
    steps = np.array([0, 1, 2, 5000, 10_000, 20_000, 40_000, 80_000])
    values = np.array([1.0, 2.0, 3.0, np.nan, 4.0, 5.0, 6.0, 7.0])
    store.ensure_run("odd")
    store.write_metrics("odd", pd.DataFrame({"step": steps, "key": KEY, "value": values}))
    got = store.read_scalars("odd", [KEY], max_points=2000)
    np.testing.assert_array_equal(got["step"], steps)
    np.testing.assert_array_equal(got["value"], values)
