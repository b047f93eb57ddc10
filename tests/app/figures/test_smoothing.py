"""The debiased EMA matches TensorBoard's loop, leaves NaN in place, and is no-op at weight 0."""

import numpy as np
import pytest

from app.figures.smoothing import ema_debiased


def tensorboard_loop(values, weight):
    """TensorBoard's smoothing written as its loop, point by point."""
    last, seen, out = 0.0, 0, []
    constant = all(v == values[0] for v in values)
    for v in values:
        if constant or not np.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        seen += 1
        out.append(last / (1 - weight ** seen))
    return np.array(out)


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.6, 0.9, 0.99, 0.999])
def test_matches_the_point_by_point_loop(weight):
    values = 3 + np.random.default_rng(0).normal(0, 0.2, 500)
    values[[10, 200]] = [np.nan, np.inf]
    np.testing.assert_allclose(ema_debiased(values, weight), tensorboard_loop(list(values), weight), rtol=1e-9)


def test_first_point_is_not_pulled_towards_zero_and_noise_shrinks():
    values = 3 + np.random.default_rng(1).normal(0, 0.2, 5000)
    smoothed = ema_debiased(values, 0.9)
    assert smoothed[0] == pytest.approx(values[0])
    assert np.std(smoothed[100:]) < 0.3 * np.std(values[100:])


def test_constant_and_out_of_range():
    np.testing.assert_array_equal(ema_debiased(np.full(5, 2.0), 0.9), np.full(5, 2.0))
    with pytest.raises(ValueError, match="smoothing weight"):
        ema_debiased(np.ones(3), 1.0)
