"""Rollups against brute force, and the reader's point budget."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from monitor.store import open_store, tables
from monitor.store.rollups import LEVEL_WIDTHS, aggregate, aggregate_levels


def brute_force(steps, values, width):
    frame = pd.DataFrame({"step": steps, "value": values})
    frame["bucket"] = frame["step"] // width
    out = {}
    for bucket, g in frame.groupby("bucket"):
        finite = g[np.isfinite(g["value"])]
        out[bucket] = {
            "n": len(g),
            "nonfinite": len(g) - len(finite),
            "min_value": finite["value"].min() if len(finite) else None,
            "max_value": finite["value"].max() if len(finite) else None,
            "min_step": int(finite.loc[finite["value"].idxmin(), "step"]) if len(finite) else None,
            "max_step": int(finite.loc[finite["value"].idxmax(), "step"]) if len(finite) else None,
            "last_step": int(g["step"].iloc[-1]),
        }
    return out


values_strategy = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False), st.just(float("nan")), st.just(float("inf"))
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), values_strategy), min_size=1, max_size=300, unique_by=lambda t: t[0]))
def test_aggregate_matches_brute_force(points):
    points.sort()
    steps = np.array([p[0] for p in points], dtype=np.int64)
    values = np.array([p[1] for p in points], dtype=float)
    for width in LEVEL_WIDTHS[:2]:
        agg = pd.DataFrame(aggregate(np.zeros(len(steps), dtype=np.int64), steps, values, width)).set_index("bucket")
        expected = brute_force(steps, values, width)
        assert sorted(agg.index) == sorted(expected)
        for bucket, exp in expected.items():
            row = agg.loc[bucket]
            assert row["n"] == exp["n"] and row["nonfinite"] == exp["nonfinite"]
            assert row["last_step"] == exp["last_step"]
            if exp["min_value"] is None:
                assert np.isnan(row["min_value"])
            else:
                assert row["min_value"] == exp["min_value"] and row["max_value"] == exp["max_value"]
                assert row["min_step"] == exp["min_step"] and row["max_step"] == exp["max_step"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 200_000), values_strategy), min_size=1, max_size=400,
                unique_by=lambda t: (t[0], t[1])))
def test_each_level_combined_from_the_finer_one_equals_aggregating_the_rows(points):
    """Coarser levels built from the level before: the same buckets and statistics as built from
    the rows (several series, sparse and dense steps, NaN and infinity), totals up to rounding."""
    points.sort()
    key_ids, steps, values = (np.array(c) for c in zip(*points))
    values = values.astype(float)
    for width, got in zip(LEVEL_WIDTHS, aggregate_levels(key_ids, steps, values), strict=True):
        want = aggregate(key_ids, steps, values, width)
        for column, expected in want.items():
            if column == "total":
                np.testing.assert_allclose(got[column], expected, rtol=1e-12, atol=1e-6)
            else:
                np.testing.assert_array_equal(got[column], expected, err_msg=f"{column} at width {width}")


def stored_rollups(store, run, key):
    with store.engine.connect() as conn:
        run_id = store.run_id(run)
        key_id = store.key_ids(conn, [key])[key]
        r = tables.rollups.c
        got = conn.execute(
            select(r.level, r.bucket, r.n, r.min_value, r.max_value, r.min_step, r.max_step)
            .where(r.run_id == run_id, r.key_id == key_id)
        ).all()
    return {(lvl, b): (n, mn, mx, ms, xs) for lvl, b, n, mn, mx, ms, xs in got}


def expected_rollups(frame):
    latest = frame.sort_values(["step", "attempt"]).drop_duplicates("step", keep="last")
    out = {}
    for level, width in enumerate(LEVEL_WIDTHS):
        for bucket, exp in brute_force(latest["step"].to_numpy(), latest["value"].to_numpy(), width).items():
            out[(level, bucket)] = (exp["n"], exp["min_value"], exp["max_value"], exp["min_step"], exp["max_step"])
    return out


def test_incremental_rollups_equal_brute_force_after_batches_and_a_resume(store_url):
    rng = np.random.default_rng(0)
    frames = []
    with open_store(store_url) as store:
        store.ensure_run("r")
        # Three appends, one replay of an old batch, then a restart that logs steps again.
        for lo, hi, attempt in [(0, 3000, 1), (3000, 7000, 1), (7000, 9000, 1), (3000, 7000, 1), (8500, 12000, 2)]:
            steps = np.arange(lo, hi)
            values = rng.normal(3.0, 0.1, len(steps))
            values[rng.integers(0, len(steps), 3)] = np.nan
            frame = pd.DataFrame({"step": steps, "key": "train/loss", "value": values, "attempt": attempt})
            if (lo, hi) == (3000, 7000) and any(f["step"].iloc[0] == 3000 for f in frames):
                frame = frames[1].copy()  # the exact same batch again
            else:
                frames.append(frame)
            store.write_metrics("r", frame)
        all_rows = pd.concat(frames)
        got = stored_rollups(store, "r", "train/loss")
        expected = expected_rollups(all_rows)
        assert got.keys() == expected.keys()
        for k, (n, mn, mx, ms, xs) in expected.items():
            assert got[k][0] == n, k
            if mn is not None:
                assert got[k][1:] == pytest.approx((mn, mx, ms, xs)), k


def test_a_million_steps_come_back_under_budget_with_the_spike(store_url):
    n = 300_000 if "postgresql" in store_url else 1_000_000
    rng = np.random.default_rng(1)
    values = 3.0 + rng.normal(0, 0.01, n)
    spike_at = 123_457
    values[spike_at] = 9.0
    with open_store(store_url) as store:
        store.ensure_run("big")
        for lo in range(0, n, 200_000):
            hi = min(n, lo + 200_000)
            store.write_metrics("big", pd.DataFrame({"step": np.arange(lo, hi), "key": "train/loss", "value": values[lo:hi]}))
        read = store.read_series("big", "train/loss", max_points=2000)
        overview = read.rows
        assert len(overview) <= 2000
        assert read.bucket_width[("big", "train/loss")] > 1
        assert (overview["step"] == spike_at).any() and overview["value"].max() == 9.0
        assert overview["step"].is_monotonic_increasing
        # A zoomed range small enough is every point, exactly.
        zoom = store.read_scalars("big", "train/loss", step_range=(spike_at - 500, spike_at + 500), max_points=2000)
        assert zoom["step"].tolist() == list(range(spike_at - 500, spike_at + 501))
        assert np.array_equal(zoom["value"].to_numpy(), values[spike_at - 500: spike_at + 501])
        # A middle-sized range is thinned but keeps its extremes.
        mid = store.read_scalars("big", "train/loss", step_range=(100_000, 150_000), max_points=500)
        assert len(mid) <= 500 and mid["value"].max() == 9.0
        assert mid["value"].min() == values[100_000:150_001].min()


def test_since_step_returns_only_new_rows(sqlite_url):
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", pd.DataFrame({"step": range(100), "key": "train/loss", "value": 1.0}))
        assert store.read_scalars("r", ["train/loss"], since_step=99).empty
        store.write_metrics("r", pd.DataFrame({"step": range(100, 105), "key": "train/loss", "value": 2.0}))
        new = store.read_scalars("r", ["train/loss", "not/logged"], since_step=99)
        assert new["step"].tolist() == [100, 101, 102, 103, 104]


def test_mid_sized_ranges_fill_the_budget(sqlite_url):
    """Ranges between the raw limit and the first rollup level still come back with ~max_points."""
    values = np.sin(np.arange(100_000) / 500.0)
    with open_store(sqlite_url) as store:
        store.ensure_run("r")
        store.write_metrics("r", pd.DataFrame({"step": np.arange(100_000), "key": "train/loss", "value": values}))
        for span in (10_000, 30_000, 100_000):
            got = store.read_scalars("r", "train/loss", step_range=(0, span - 1), max_points=2000)
            assert 1000 <= len(got) <= 2000, (span, len(got))


def test_downsampled_series_end_at_the_last_logged_step(store_url):
    with open_store(store_url) as store:
        store.ensure_run("r")
        n = 50_001
        store.write_metrics("r", pd.DataFrame({"step": np.arange(n), "key": "train/loss", "value": np.cos(np.arange(n))}))
        for step_range in (None, (0, 33_333), (10, 49_999)):
            got = store.read_scalars("r", "train/loss", step_range=step_range, max_points=500)
            last = n - 1 if step_range is None else step_range[1]
            assert len(got) <= 500 and got["step"].iloc[-1] == last
            assert got["value"].iloc[-1] == np.cos(last)
            assert got["step"].is_monotonic_increasing and got["step"].is_unique


def test_bucket_means_are_the_latest_attempts_finite_means_after_a_replay_and_a_resume(store_url):
    rng = np.random.default_rng(3)
    with open_store(store_url) as store:
        store.ensure_run("r")
        first = pd.DataFrame({"step": np.arange(0, 300), "key": "train/loss", "value": rng.normal(3, 0.2, 300)})
        first.loc[70, "value"] = np.nan
        first.loc[192:255, "value"] = np.inf  # a bucket with no finite value has no mean
        store.write_metrics("r", first)
        store.write_metrics("r", first)  # a replay changes nothing
        resumed = pd.DataFrame({"step": np.arange(100, 160), "key": "train/loss", "value": 7.0, "attempt": 2})
        store.write_metrics("r", resumed)
        latest = first.set_index("step")["value"].copy()
        latest.loc[100:159] = 7.0
        got = store.read_bucket_means("r", "train/loss")
        width = LEVEL_WIDTHS[0]
        finite = latest[np.isfinite(latest)]
        expected = finite.groupby(finite.index // width).mean()
        assert got["value"].tolist() == pytest.approx(expected.tolist())
        # Halfway between a bucket's first step and its last logged one (the last bucket ends at 299).
        assert got["step"].tolist() == [31, 95, 159, 277]
        assert store.read_bucket_means("r", "train/loss", step_range=(100, 130))["step"].tolist() == [95, 159]
        assert store.read_bucket_means("r", "eval/heldout/c4/loss").empty
