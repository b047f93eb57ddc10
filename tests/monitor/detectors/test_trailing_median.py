"""The detectors' trailing median is pandas' rolling median, bit for bit, wherever the window
meets the series' start, its gaps or its end."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from monitor.detectors.stats import trailing_median


@pytest.mark.parametrize("n", [0, 1, 5, 31, 32, 33, 1000, 50_000])
@pytest.mark.parametrize("window,min_count", [(32, None), (500, 32), (5, 1)])
def test_trailing_median_is_pandas_rolling_median(n, window, min_count):
    rng = np.random.default_rng(n)
    x = rng.normal(size=n)
    x[rng.random(n) < 0.01] = np.nan  # a logged NaN leaves its windows a value short
    expected = pd.Series(x).rolling(window, min_periods=min_count).median().to_numpy()
    assert np.array_equal(trailing_median(x, window, min_count), expected, equal_nan=True)
