"""The x axis of a run view: steps, or tokens consumed, mapped per run both ways.

Two runs are compared on tokens when their batch sizes differ. A run's tokens come from its
`tokens_per_step` (exact, linear) or, failing that, from its logged `train/tokens` series, which is
interpolated: a downsampled read of a cumulative count is close to linear between its points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AxisMap:
    """Steps <-> x of one run. `knots_*` are set for an interpolated token axis."""

    kind: str = "step"
    tokens_per_step: float | None = None
    knots_step: np.ndarray | None = None
    knots_x: np.ndarray | None = None

    @property
    def title(self) -> str:
        return "tokens" if self.kind == "tokens" else "step"

    def to_x(self, steps) -> np.ndarray:
        if self.kind == "step":
            # Integer steps stay integers: plotly sends them as the smallest int type that holds
            # them (2-4 bytes a point instead of 8).
            return np.asarray(steps)
        steps = np.asarray(steps, dtype=float)
        if self.tokens_per_step is not None:
            return steps * self.tokens_per_step
        return _interp_extrapolate(steps, self.knots_step, self.knots_x)

    def to_steps(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if self.kind == "step":
            return x
        if self.tokens_per_step is not None:
            return x / self.tokens_per_step
        return _interp_extrapolate(x, self.knots_x, self.knots_step)


STEP_AXIS = AxisMap()


def linear_tokens(tokens_per_step: float) -> AxisMap:
    return AxisMap(kind="tokens", tokens_per_step=float(tokens_per_step))


def interpolated_tokens(steps: np.ndarray, tokens: np.ndarray) -> AxisMap | None:
    """A token axis from logged (step, cumulative tokens) points; None if they cannot define one."""
    steps = np.asarray(steps, dtype=float)
    tokens = np.asarray(tokens, dtype=float)
    ok = np.isfinite(steps) & np.isfinite(tokens)
    steps, tokens = steps[ok], tokens[ok]
    order = np.argsort(steps, kind="stable")
    steps, tokens = steps[order], np.maximum.accumulate(tokens[order]) if len(tokens) else tokens
    # Keep strictly increasing pairs so the inverse is a function too.
    keep = np.concatenate([[True], (np.diff(steps) > 0) & (np.diff(tokens) > 0)]) if len(steps) else ok[:0]
    steps, tokens = steps[keep], tokens[keep]
    if len(steps) < 2:
        return None
    return AxisMap(kind="tokens", knots_step=steps, knots_x=tokens)


def _interp_extrapolate(v: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """np.interp that continues the end slopes linearly (a live run logs past its last knot)."""
    out = np.interp(v, xp, fp)
    lo_slope = (fp[1] - fp[0]) / (xp[1] - xp[0])
    hi_slope = (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    below, above = v < xp[0], v > xp[-1]
    out[below] = fp[0] + (v[below] - xp[0]) * lo_slope
    out[above] = fp[-1] + (v[above] - xp[-1]) * hi_slope
    return out
