"""What `Monitor.log` keeps of each value, taken on the caller's thread at the call.

A value is stored as it was when `log()` was called, whatever the caller does with it afterwards:
a host value (a Python or NumPy number, a 0-d array, a CPU torch tensor) is read into a float
here, which costs well under a microsecond. A device value is never read here, since reading it
would wait for the device: a CUDA torch tensor starts a copy into pinned host memory
(device_copy.py) and the writer waits on that copy's event; a JAX array is immutable, so it is kept
as it is and its copy to the host is started. A value of another type that can be turned into a
float (another framework's array) is kept and read on the writer thread, as it cannot be told
apart from a device value: it must not change after the call.

A value that is not one number (a string, None, a complex number, an array of several elements,
an integer too large for a float) is refused here, the same way for every kind of value.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

# NumPy dtype kinds that are numbers: bool, signed and unsigned integers, floats.
_NUMBER_KINDS = "biuf"


class NotANumber(Exception):
    """The value cannot be stored as one number; the message says why."""


def snapshot(metrics: dict[str, Any], refuse) -> dict[str, Any]:
    """`metrics` with each value made independent of the caller's objects: a float, or what the
    writer turns into one (a pending device copy, a JAX array, another framework's value).
    `refuse(key, value, why)` is called for a value that is not one number; it raises or returns,
    and a refused value is left out."""
    out: dict[str, Any] = {}
    cuda: dict[str, Any] | None = None
    for key, value in metrics.items():
        kind = type(value)
        if kind is float:
            out[key] = value
            continue
        try:
            if kind is int:
                out[key] = _fitting(value)
            elif _is_torch(value):
                if value.is_cuda:
                    _check_tensor(value)
                    if cuda is None:
                        cuda = {}
                    cuda[key] = value
                    out[key] = None  # keeps the caller's order; filled in below
                else:
                    out[key] = _torch_value(value)
            elif _is_jax(value):
                out[key] = _jax_value(value)
            else:
                out[key] = _host_value(value)
        except NotANumber as exc:
            refuse(key, value, str(exc))
            out.pop(key, None)
            if cuda is not None:
                cuda.pop(key, None)
    if cuda:
        from monitor.device_copy import start_copies

        out.update(start_copies(cuda))
    return out


def _host_value(value: Any) -> Any:
    if isinstance(value, (str, bytes, bytearray)):
        raise NotANumber("is text, not a number")
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind not in _NUMBER_KINDS:
            raise NotANumber(f"is a NumPy {value.dtype} value, not a real number")
        if value.size != 1:
            raise NotANumber(f"is an array of shape {value.shape}, not one number")
        return _fitting(value.item())
    if isinstance(value, complex):
        raise NotANumber("is a complex number")
    if hasattr(type(value), "__float__"):
        if isinstance(value, (int, float)) or type(value).__module__ in ("decimal", "fractions"):
            return _fitting(value)
        return value  # another framework's value: read on the writer thread
    raise NotANumber(f"is a {type(value).__name__}, not a number")


def _fitting(value: Any) -> float:
    """float(value), refusing a finite value that only fits a float as infinity."""
    try:
        number = float(value)
    except OverflowError:
        raise NotANumber("does not fit a float") from None
    except (TypeError, ValueError) as exc:
        raise NotANumber(f"is not a number ({exc})") from None
    if math.isinf(number) and value != number:
        raise NotANumber("does not fit a float")
    return number


def _is_torch(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _is_jax(value: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def _check_tensor(value: Any) -> None:
    if value.numel() != 1:
        raise NotANumber(f"is a tensor of shape {tuple(value.shape)}, not one number")
    if value.is_complex():
        raise NotANumber("is a complex tensor")


def _torch_value(value: Any) -> Any:
    """A CPU tensor is read now; a tensor on another device (not CUDA) is detached and copied on
    its device, which does not wait for it, and read on the writer thread."""
    _check_tensor(value)
    if value.device.type == "cpu":
        return _fitting(value.item())
    return value.detach().clone()


def _jax_value(value: Any) -> Any:
    if value.size != 1:
        raise NotANumber(f"is an array of shape {tuple(value.shape)}, not one number")
    if np.dtype(value.dtype).kind not in _NUMBER_KINDS:
        raise NotANumber(f"is a JAX {value.dtype} array, not a real number")
    start = getattr(value, "copy_to_host_async", None)
    if start is not None:
        start()  # the writer's float() then finds the value on the host
    return value
