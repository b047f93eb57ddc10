"""Step and token axes, both directions."""

from __future__ import annotations

import numpy as np
import pytest

from app.dashboard.axis import STEP_AXIS, interpolated_tokens, linear_tokens


def test_step_axis_keeps_integer_steps():
    out = STEP_AXIS.to_x(np.array([0, 5, 10]))
    assert out.dtype.kind == "i" and out.tolist() == [0, 5, 10]


def test_linear_token_axis_round_trips():
    axis = linear_tokens(4096)
    assert axis.to_x([0, 10]).tolist() == [0.0, 40960.0]
    assert axis.to_steps(axis.to_x([3, 7])).tolist() == [3.0, 7.0]
    assert axis.title == "tokens"


def test_interpolated_token_axis_follows_a_changing_batch_size_and_extrapolates():
    steps = np.array([0, 100, 200, 300])
    tokens = np.array([0, 100_000, 300_000, 500_000])  # batch doubled at step 100
    axis = interpolated_tokens(steps, tokens)
    assert axis.to_x([50, 150]).tolist() == [50_000, 200_000]
    assert axis.to_x([400]).tolist() == [700_000]  # past the last point, at the last slope
    assert axis.to_steps([200_000]).tolist() == pytest.approx([150])


def test_interpolated_token_axis_needs_two_increasing_points():
    assert interpolated_tokens(np.array([5]), np.array([100])) is None
    assert interpolated_tokens(np.array([1, 2]), np.array([np.nan, np.nan])) is None
