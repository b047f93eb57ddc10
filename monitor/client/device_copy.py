"""CUDA torch tensors taken by `Monitor.log` without a device sync on the training thread.

Reading a CUDA tensor (`float(t)`, `t.item()`) waits for every kernel queued before it, which
stalls the step that follows; keeping the tensor until the writer reads it keeps its memory (and,
when it was logged before `backward()`, its autograd graph) alive for a flush interval, and lets an
in-place update change what is stored. So on the training thread the logged tensors of one call are
detached, stacked on their device (one kernel per device and dtype), copied into pinned host memory
with `non_blocking=True`, and a CUDA event is recorded behind the copy. Nothing here waits. The
writer thread waits on that event alone (not on the device) and reads the host copy.

torch is not imported here: a tensor reaches this module only when the caller has loaded it.
"""

from __future__ import annotations

import sys
from typing import Any


class CudaRuntime:
    """The two CUDA calls the copy needs, in one place so they can be named and replaced."""

    def pinned_like(self, flat: Any) -> Any:
        torch = sys.modules["torch"]
        # Pinned tensors come from torch's caching host allocator: after the first calls this
        # reuses a freed block instead of asking the driver for page-locked memory.
        return torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)

    def record_event(self, device: Any) -> Any:
        torch = sys.modules["torch"]
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))  # the stream the copy was queued on
        return event


cuda = CudaRuntime()


class PendingCopy:
    """Values of one device and dtype on their way into pinned host memory."""

    __slots__ = ("_host", "_event", "_values")

    def __init__(self, tensors: list[Any]) -> None:
        torch = sys.modules["torch"]
        detached = [t.detach().reshape(()) for t in tensors]
        flat = torch.stack(detached) if len(detached) > 1 else detached[0].reshape(1)
        self._host = cuda.pinned_like(flat)
        self._host.copy_(flat, non_blocking=True)
        self._event = cuda.record_event(flat.device)
        self._values: list[float] | None = None

    def values(self) -> list[float]:
        """The host copy, on the writer thread: waits for this copy's event only."""
        if self._values is None:
            self._event.synchronize()
            self._values = self._host.tolist()
            self._host = self._event = None  # the pinned block goes back to torch's cache
        return self._values


class DeviceValue:
    """One logged value of a PendingCopy; the writer's float() waits for the copy."""

    __slots__ = ("_copy", "_index")

    def __init__(self, copy: PendingCopy, index: int) -> None:
        self._copy = copy
        self._index = index

    def __float__(self) -> float:
        return float(self._copy.values()[self._index])


def start_copies(tensors: dict[str, Any]) -> dict[str, DeviceValue]:
    """Start the copies of `tensors` (key -> one-element CUDA tensor), one per device and dtype."""
    groups: dict[tuple, list[str]] = {}
    for key, tensor in tensors.items():
        groups.setdefault((tensor.device, tensor.dtype), []).append(key)
    out: dict[str, DeviceValue] = {}
    for keys in groups.values():
        copy = PendingCopy([tensors[k] for k in keys])
        for index, key in enumerate(keys):
            out[key] = DeviceValue(copy, index)
    return out
