"""Standard errors for eval numbers that a run logged without one.

W&B exports of OLMo runs carry held-out losses and downstream accuracies at every checkpoint but
no error bars. The scatter of the run-minus-reference difference across checkpoints still says
how noisy one checkpoint's difference is: the two curves share their shape, so the difference is
nearly flat and what remains is noise. For a smooth curve plus independent noise e, the second
difference e[i+1] - 2 e[i] + e[i-1] has variance 6 sigma^2, so sigma = robust_sd(second
differences) / sqrt(6); second differences also remove a difference that drifts slowly. This
counts checkpoint-to-checkpoint model fluctuation as noise too, and misses noise that every
checkpoint shares (the same eval items each time): the tables mark such errors with ≈.
"""

from __future__ import annotations

import math

import numpy as np

from monitor.detectors.stats import mad_sigma

# Var(e[i+1] - 2 e[i] + e[i-1]) = (1 + 4 + 1) sigma^2 for independent e.
SECOND_DIFFERENCE_VARIANCE = 6.0
# Fewer checkpoints than this give a spread estimate too rough to print (3 second differences).
MIN_POINTS = 5


def scatter_sigma(values: np.ndarray) -> float:
    """Per-checkpoint noise of a nearly smooth curve (e.g. a difference of two runs' curves at
    matching checkpoints, in checkpoint order) from its second differences; NaN when too short."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < MIN_POINTS:
        return math.nan
    return mad_sigma(np.diff(v, n=2)) / math.sqrt(SECOND_DIFFERENCE_VARIANCE)
