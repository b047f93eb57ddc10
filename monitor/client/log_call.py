"""What `Monitor.log` does on the caller's thread, before anything is queued: check each key and
the step, and take each value as it is at the call.

A bad key or step is the caller's mistake and must be said where it was made, at once: once it is
queued, the writer can only find it seconds later, far from the line that caused it. The checks
cost a set and a dict lookup per key.

A value is stored as it was when `log()` was called, whatever the caller does with it afterwards:
a host value (a Python or NumPy number, a 0-d array, a CPU torch tensor) is read into a float
here (bench_log_values measures what it costs). A device value is never read here, since reading it
would wait for the device: a CUDA torch tensor starts a copy into pinned host memory
(device_copy.py) and the writer waits on that copy's event; a JAX array is immutable, so it is kept
as it is and its copy to the host is started. A value of another type that can be turned into a
float (another framework's array) is kept and read on the writer thread, as it cannot be told
apart from a device value: it must not change after the call.

A value that is not one number (a string, None, a complex number, an array of several elements,
an integer too large for a float) is refused like a bad key, the same way for every kind of value.
"""

from __future__ import annotations

import logging
import math
import numbers
import operator
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP, is_valid_key

log = logging.getLogger("gapwatch.client")
MAX_SHOWN = 80  # characters of a refused value shown in its message


class InvalidLogError(GapwatchError, ValueError):
    """A key or step `log()` cannot accept: raised on the caller's thread, nothing of it queued."""


class LogChecks:
    def __init__(self, run: str, on_invalid: str = "raise") -> None:
        if on_invalid not in ("raise", "warn"):
            raise ValueError(f"on_invalid must be 'raise' or 'warn', not {on_invalid!r}")
        if not isinstance(run, str) or not run.strip() or len(run) > 255:
            raise InvalidLogError(f"gapwatch: run name {run!r} must have 1 to 255 characters, not all blank")
        self.run = run
        self.raise_errors = on_invalid == "raise"
        self._valid_keys: set[str] = set()
        self._last_step: dict[str, int] = {}
        self._warned: set[str] = set()

    def step(self, step: Any) -> int | None:
        """The step as an int; None (with a warning) when it is bad and bad input is dropped."""
        if type(step) is int and 0 <= step <= MAX_STEP:
            return step
        problem = _step_problem(step)
        if problem is None:
            return int(step)
        self._reject(f"step {step!r} {problem}", f"step:{problem}")
        return None

    def metrics(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        """The metrics to queue: all of them, or (when dropping) those with a good key whose
        series does not go back in time. A series' steps never decrease within one process."""
        last = self._last_step
        bad: list[str] = []
        for key in metrics:
            if key not in self._valid_keys:
                if isinstance(key, str) and is_valid_key(key):
                    self._valid_keys.add(key)
                else:
                    self._reject(
                        f"metric key {key!r} is not of the form namespace/name in lower snake case "
                        "(like train/loss)", f"key:{key!r}")
                    bad.append(key)
                    continue
            previous = last.get(key)
            if previous is not None and step < previous:
                self._reject(f"step {step} of {key!r} comes after step {previous}: a series' steps "
                             "never go back within one process (a restart is a new Monitor)",
                             f"backwards:{key}")
                bad.append(key)
        # `metrics` is snapshot's own dict, never the caller's: no copy needed.
        kept = metrics if not bad else {k: v for k, v in metrics.items() if k not in bad}
        for key in kept:
            last[key] = step
        return kept

    def refuse_value(self, key: Any, value: Any, why: str) -> None:
        """A value that is not one number (`snapshot`), refused like a bad key."""
        self._reject(f"the value {_shown(value)} of {_shown(key)} {why}", f"value:{_shown(key)}")

    def _reject(self, problem: str, what: str) -> None:
        message = f"gapwatch run {self.run!r}: {problem}"
        if self.raise_errors:
            raise InvalidLogError(message)
        if what not in self._warned:
            self._warned.add(what)
            log.warning("%s; dropped (said once)", message)


def _step_problem(step: Any) -> str | None:
    """Why `step` is not a step, or None when int(step) is one."""
    if isinstance(step, bool):
        return "is a bool, not an integer"
    if isinstance(step, numbers.Integral):
        value = int(step)
    elif isinstance(step, numbers.Real):
        as_float = float(step)
        if not math.isfinite(as_float):
            return "is not finite"
        if not as_float.is_integer():
            return "is not an integer"
        value = int(as_float)
    else:
        try:
            value = operator.index(step)
        except TypeError:
            return "is not an integer"
    if value < 0:
        return "is negative"
    if value > MAX_STEP:
        return f"is beyond the largest step the store keeps ({MAX_STEP})"
    return None


def _shown(value: Any) -> str:
    """repr(value), cut short: a refused value may be a megabyte of text."""
    try:
        shown = repr(value)
    except ValueError:  # an integer of more digits than Python will print
        return f"<{type(value).__name__} too long to show>"
    return shown if len(shown) <= MAX_SHOWN else shown[:MAX_SHOWN] + "..."


# --- values ---------------------------------------------------------------------------------------
# NumPy dtype kinds that are numbers: bool, signed and unsigned integers, floats.
_NUMBER_KINDS = "biuf"


class NotANumber(Exception):
    """The value cannot be stored as one number; the message says why."""


_CUDA = object()  # a reader's answer for a CUDA tensor: its copy starts once the call's are known


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
        reader = _READERS.get(kind) or _reader_for(kind)
        try:
            taken = reader(value)
        except NotANumber as exc:
            refuse(key, value, str(exc))
            continue
        if taken is _CUDA:
            if cuda is None:
                cuda = {}
            cuda[key] = value
            out[key] = None  # keeps the caller's order; filled in below
        else:
            out[key] = taken
    if cuda:
        from monitor.client.device_copy import start_copies

        out.update(start_copies(cuda))
    return out


# How each type's values are taken, decided once per type: a value's type fixes which of these
# applies (a torch or JAX type exists only once its framework is loaded).
_READERS: dict[type, Callable[[Any], Any]] = {}


def _reader_for(kind: type) -> Callable[[Any], Any]:
    torch, jax = sys.modules.get("torch"), sys.modules.get("jax")
    if issubclass(kind, (str, bytes, bytearray)):
        reader = _text
    elif issubclass(kind, (int, float)):
        reader = _fitting
    elif issubclass(kind, np.generic):
        dtype = np.dtype(kind)
        if dtype.kind not in _NUMBER_KINDS:
            reader = _refusing(f"is a NumPy {dtype} value, not a real number")
        elif dtype.itemsize > 8:  # a long double may hold what no float can
            reader = _fitting
        else:
            reader = float
    elif issubclass(kind, np.ndarray):
        reader = _array
    elif torch is not None and issubclass(kind, torch.Tensor):
        reader = _tensor
    elif jax is not None and issubclass(kind, jax.Array):
        reader = _jax_array
    elif issubclass(kind, complex):
        reader = _refusing("is a complex number")
    elif kind.__module__ in ("decimal", "fractions"):
        reader = _fitting
    elif hasattr(kind, "__float__"):
        reader = _kept  # another framework's value: read on the writer thread
    else:
        reader = _refusing(f"is a {kind.__name__}, not a number")
    _READERS[kind] = reader
    return reader


def _text(value: Any) -> Any:
    raise NotANumber("is text, not a number")


def _refusing(why: str) -> Callable[[Any], Any]:
    def refuse(value: Any) -> Any:
        raise NotANumber(why)
    return refuse


def _kept(value: Any) -> Any:
    return value


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


def _array(value: Any) -> float:
    if value.dtype.kind not in _NUMBER_KINDS:
        raise NotANumber(f"is a NumPy {value.dtype} value, not a real number")
    if value.size != 1:
        raise NotANumber(f"is an array of shape {value.shape}, not one number")
    return _fitting(value.item())


def _tensor(value: Any) -> Any:
    """A CPU tensor is read now. A CUDA tensor's copy is started by the caller; a tensor on
    another device is detached and copied on that device, which does not wait for it, and read
    on the writer thread."""
    if value.is_cpu:
        try:
            number = value.item()
        except RuntimeError:  # not one element
            number = None
        if type(number) is float:
            return number
    if value.numel() != 1:
        raise NotANumber(f"is a tensor of shape {tuple(value.shape)}, not one number")
    if value.is_complex():
        raise NotANumber("is a complex tensor")
    if value.is_cpu:
        return _fitting(number)  # an integer or bool tensor
    if value.is_cuda:
        return _CUDA
    return value.detach().clone()


def _jax_array(value: Any) -> Any:
    if value.size != 1:
        raise NotANumber(f"is an array of shape {tuple(value.shape)}, not one number")
    if np.dtype(value.dtype).kind not in _NUMBER_KINDS:
        raise NotANumber(f"is a JAX {value.dtype} array, not a real number")
    start = getattr(value, "copy_to_host_async", None)
    if start is not None:
        start()  # the writer's float() then finds the value on the host
    return value
