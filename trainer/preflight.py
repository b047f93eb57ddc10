"""A health check before training: one matmul on the device, compared with NumPy in float64.

OLMo's cluster runs such a check on every node before a job starts, because a bad accelerator
computes wrong numbers silently. A failed check stops the run before it wastes any compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

PREFLIGHT_SIZE = 256
# float32 accumulation over 256 products of unit normals errs by ~1e-5 relative to the result's
# scale; 1e-3 leaves room for any correct device (bf16-emulating passes included at HIGHEST
# precision) while catching a broken one, whose errors are of the order of the values themselves.
PREFLIGHT_TOLERANCE = 1e-3


@dataclass
class PreflightResult:
    ok: bool
    max_abs_error: float
    """Largest absolute difference from NumPy, relative to the largest |value| of the result."""
    device: str


def check_matmul(device: jax.Device | None = None, size: int = PREFLIGHT_SIZE,
                 tolerance: float = PREFLIGHT_TOLERANCE) -> PreflightResult:
    device = device or jax.local_devices()[0]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    got = jax.jit(lambda x, y: jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST))(
        jax.device_put(a, device), jax.device_put(b, device))
    error = float(np.max(np.abs(np.asarray(got, np.float64) - expected)) / np.max(np.abs(expected)))
    return PreflightResult(ok=bool(error <= tolerance), max_abs_error=error, device=str(device))
