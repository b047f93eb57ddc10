"""The detectors' trailing median is pandas' rolling median, bit for bit, wherever the window
meets the series' start or its end, for finite series (the fast path) and ones holding NaN."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from monitor.detectors.stats import trailing_median


@pytest.mark.parametrize("with_nan", [False, True])
@pytest.mark.parametrize("n", [0, 1, 5, 31, 32, 33, 1000, 50_000])
@pytest.mark.parametrize("window,min_count", [(32, None), (500, 32), (5, 1), (7, None)])
def test_trailing_median_is_pandas_rolling_median(n, window, min_count, with_nan):
    rng = np.random.default_rng(n)
    x = rng.gamma(2.0, size=n)
    if with_nan:
        x[rng.random(n) < 0.01] = np.nan  # a logged NaN leaves its windows a value short
    expected = pd.Series(x).rolling(window, min_periods=min_count).median().to_numpy()
    assert np.array_equal(trailing_median(x, window, min_count), expected, equal_nan=True)


def test_ties_and_steps():
    """A step-wise series: many equal values in a window, as a logged learning rate has."""
    x = np.repeat([3.0, 1.0, 2.0, 2.0, 5.0], 40)
    assert np.array_equal(trailing_median(x, 32), pd.Series(x).rolling(32).median().to_numpy(), equal_nan=True)
