"""The train-loss delta chart's windows are the reference-divergence detector's: the band each had
to clear, only the windows it judges, and, from bucket means, an estimate close to that band."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app import figures
from monitor.detectors.reference_divergence import ReferenceDivergence
from monitor.schema import TRAIN_LOSS, RunData, RunInfo

BUCKET = 64  # steps of the store's finest rollup


def pair(steps: int, *, seed: int = 3, noise: float = 0.05, last: int | None = None):
    """A run below its reference from the middle on, logged every step from 0 to `last`."""
    rng = np.random.default_rng(seed)
    s = np.arange((last if last is not None else steps - 1) + 1)
    level = 3 + 4 * (s + 100.0) ** -0.4
    ref = level + rng.normal(0, noise, s.size)
    run = level - 0.08 * (s > s.size // 2) + rng.normal(0, noise, s.size)
    return s, run, ref


def frame(steps, values) -> pd.DataFrame:
    return pd.DataFrame({"step": np.asarray(steps, dtype="int64"), "value": np.asarray(values, dtype=float)})


def run_data(name: str, steps, values) -> RunData:
    scalars = pd.DataFrame({TRAIN_LOSS: values}, index=pd.Index(steps, name="step", dtype="int64"))
    return RunData(info=RunInfo(name=name), scalars=scalars)


def judged_windows(s, run, ref) -> pd.DataFrame:
    detector = ReferenceDivergence()
    w = detector.windows(run_data("run", s, run), run_data("ref", s, ref))
    w = w[w["complete"].astype(bool)].reset_index(drop=True)
    return w.assign(band=detector.band(w["stderr"], w["level"], w["slope"]))


def bucket_means(s, values) -> pd.DataFrame:
    """What the store's read_bucket_means gives: each bucket's mean, halfway along its logged steps."""
    buckets = pd.Series(values).groupby(s // BUCKET)
    first, last = s[::BUCKET], np.minimum(s[::BUCKET] + BUCKET - 1, s[-1])
    return frame((first + last) // 2, buckets.mean().to_numpy())


def test_every_window_is_the_detectors_own_with_the_band_it_had_to_clear():
    s, run, ref = pair(8000)
    windows, _ = figures.reference_delta(frame(s, run), frame(s, ref))
    truth = judged_windows(s, run, ref)
    assert len(windows) == len(truth) == 80
    np.testing.assert_allclose(windows["x"], truth["mid_step"])
    np.testing.assert_allclose(windows["delta"], truth["delta"], rtol=1e-12)
    np.testing.assert_allclose(windows["band"], truth["band"], rtol=1e-12)


def test_a_long_view_draws_the_detectors_windows_k_at_a_time():
    s, run, ref = pair(60_000)
    windows, _ = figures.reference_delta(frame(s, run), frame(s, ref))
    truth = judged_windows(s, run, ref)
    # 600 windows in a view of at most 200: three at a time, each the median of its three (as a
    # finding quotes "the median of the window medians") and of the bands they had to clear.
    assert len(windows) == 200
    threes = truth.groupby(truth["window"] // 3)
    np.testing.assert_allclose(windows["delta"], threes["delta"].median(), rtol=1e-12)
    np.testing.assert_allclose(windows["band"], threes["band"].median(), rtol=1e-12)
    # A band drawn from the wider windows' own spread was narrower than any the detector applied.
    assert windows["band"].median() == pytest.approx(truth["band"].median(), rel=0.02)


def test_the_window_the_detector_leaves_unjudged_is_not_drawn():
    # Logged to step 30,000 inclusive: the window from 30,000 holds one step. Its one-point median
    # was drawn as a recovery at the chart's right edge.
    s, run, ref = pair(0, last=30_000)
    windows, _ = figures.reference_delta(frame(s, run), frame(s, ref))
    assert windows["x"].max() < 30_000 - 50
    assert windows["delta"].iloc[-5:].median() == pytest.approx(-0.08, abs=0.01)
    # A gap in the log leaves a window with fewer than half its values: not judged, not drawn.
    keep = (s < 1020) | (s > 1090)
    windows, _ = figures.reference_delta(frame(s[keep], run[keep]), frame(s, ref), max_windows=1000)
    assert not ((windows["x"] >= 1000) & (windows["x"] < 1100)).any()
    assert ((windows["x"] >= 900) & (windows["x"] < 1000)).any()


def test_bucket_means_give_the_detectors_band_give_or_take_its_scatter():
    s, run, ref = pair(40_000)
    exact, _ = figures.reference_delta(frame(s, run), frame(s, ref))
    means, _ = figures.reference_delta(bucket_means(s, run), bucket_means(s, ref), values_per_point=BUCKET)
    # Windows of 300 steps (100-step windows, at least four buckets of 64 each): 133 of them.
    assert len(means) == 133
    ratio = means["band"].to_numpy() / np.interp(means["x"], exact["x"], exact["band"])
    # The detector's band scatters from window to window with its windows' own spread (each
    # from 100 values); the estimate, pooled over 128 buckets, runs through it.
    assert np.median(ratio) == pytest.approx(1.0, abs=0.05)
    assert np.percentile(np.abs(ratio - 1), 90) < 0.2 and np.abs(ratio - 1).max() < 0.3
    # The medians of bucket means follow the window medians to well inside the band.
    assert np.abs(means["delta"] - np.interp(means["x"], exact["x"], exact["delta"])).max() < 0.5 * exact["band"].min()
    # Taken for logged values, the means' small spread would make the band too narrow.
    naive, _ = figures.reference_delta(bucket_means(s, run), bucket_means(s, ref))
    assert naive["band"].median() < 0.8 * exact["band"].median()


def test_one_shared_step_is_a_point_of_the_delta_and_no_window():
    windows, points = figures.reference_delta(frame([1], [3.0]), frame([1], [5.25]))
    assert points.to_dict("records") == [{"x": 1.0, "delta": -2.25}]
    assert windows.empty
