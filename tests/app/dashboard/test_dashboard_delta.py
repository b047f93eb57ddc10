"""The train loss delta panel draws the reference-divergence detector's windows and band, as the
report does, at any point budget: from every logged value where the view's rows fit the budget's
raw reads, else from the store's bucket means; never from the bucket extremes a downsampled chart
draws, whose spread widened the band five times over."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app import figures
from app.dashboard import panels, queries
from app.dashboard.routes import ViewSpec
from monitor.schema import TRAIN_LOSS
from monitor.store import open_store

STEPS = 20_001  # steps 0 to 20,000: the window from 20,000 holds one step
DRIFT_FROM = 12_000
DRIFT = -0.08


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('delta') / 'delta.db'}"
    rng = np.random.default_rng(11)
    steps = np.arange(STEPS)
    level = 3 + 4 * (steps + 100.0) ** -0.4
    with open_store(url) as store:
        for run, shift in (("reference", 0.0), ("repeating", DRIFT)):
            store.ensure_run(run, reference="reference" if run == "repeating" else None)
            loss = level + shift * (steps >= DRIFT_FROM) + rng.normal(0, 0.05, STEPS)
            store.write_metrics(run, pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": loss}))
    return url


def drawn(url: str, max_points: int, step_range=None) -> pd.DataFrame:
    with open_store(url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run="repeating"), max_points, step_range)
    fig = panels.build(view).figures["delta"]
    band = next(t for t in fig.data if t.name == "divergence threshold")
    median = next(t for t in fig.data if (t.name or "").endswith("(window median)"))
    return pd.DataFrame({"x": np.asarray(median.x, dtype=float), "delta": np.asarray(median.y, dtype=float),
                         "band": -np.asarray(band.y, dtype=float)})


def reported(url: str, step_range=None) -> pd.DataFrame:
    """The report's windows: the same function on every logged value of both runs."""
    with open_store(url, read_only=True) as store:
        run, ref = store.load_run("repeating", [TRAIN_LOSS]), store.load_run("reference", [TRAIN_LOSS])
    run, ref = figures.series_frame(run.series(TRAIN_LOSS)), figures.series_frame(ref.series(TRAIN_LOSS))
    if step_range is not None:
        run = run[run["step"].between(*step_range)]
        ref = ref[ref["step"].between(*step_range)]
    return figures.reference_delta(run, ref)[0]


@pytest.mark.parametrize(("max_points", "step_range"), [(2000, None), (1500, None), (2000, (8_000, 14_000)),
                                                        (400, (8_000, 14_000))])
def test_the_band_is_the_reports_where_the_view_reads_every_row(url, max_points, step_range):
    # Each view draws its train loss downsampled (1,500 points of 20,000 steps: the extremes of
    # buckets of 13), and has at most 16 rows of it per point: read whole for the windows.
    dashboard, report = drawn(url, max_points, step_range), reported(url, step_range)
    np.testing.assert_allclose(dashboard["x"], report["x"])
    np.testing.assert_allclose(dashboard["band"], report["band"], rtol=1e-6)
    np.testing.assert_allclose(dashboard["delta"], report["delta"], rtol=1e-6)


def test_past_the_rows_it_may_read_the_band_is_the_reports_give_or_take_its_scatter(url):
    # 200 points: the view's 20,000 rows are more than 16 per point, so the panel takes bucket means.
    dashboard, report = drawn(url, 200), reported(url)
    ratio = dashboard["band"].to_numpy() / np.interp(dashboard["x"], report["x"], report["band"])
    assert np.median(ratio) == pytest.approx(1.0, abs=0.05)
    assert np.percentile(np.abs(ratio - 1), 90) < 0.2
    # The drift below the reference clears the band everywhere after it started, as found.
    late = dashboard[dashboard["x"] > DRIFT_FROM + 500]
    assert (late["delta"] < -late["band"]).all()


@pytest.mark.parametrize("max_points", [2000, 200])
def test_the_last_window_is_drawn_only_once_the_detector_judges_it(url, max_points):
    # The window from step 20,000 holds one value: its median is one step's noise, which was drawn
    # as a jump back towards zero at the right edge.
    dashboard = drawn(url, max_points)
    assert dashboard["x"].max() < STEPS - 50
    assert dashboard["delta"].iloc[-1] == pytest.approx(DRIFT, abs=0.02)
