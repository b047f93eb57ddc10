"""CUDA tensors through `Monitor.log`: no device sync and no `.item()` on the training thread, the
tensor (and its autograd graph) not kept, and the writer waiting on the copy's event.

This machine has no GPU, so the two CUDA runtime calls of monitor/client/device_copy.py (a pinned host
buffer, an event recorded on the current stream) are replaced by a fake that records the thread it
runs on, and the tensors say `is_cuda`. What runs for real: log()'s routing, the detach, stacking
per device and dtype, the `non_blocking` copy call, the writer's wait on the event and its read of
the host copy. What does not: real pinned memory, an asynchronous copy and a real event
(scripts/device_check.sh runs those where a GPU is lent).
"""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch

from monitor.client import Monitor, MonitorSettings, device_copy
from monitor.store import open_store


class CudaLike(torch.Tensor):
    """A CPU tensor that reports itself as a CUDA one."""

    @property
    def is_cuda(self) -> bool:
        return True

    @property
    def is_cpu(self) -> bool:
        return False


def cuda_like(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.as_subclass(CudaLike)


class FakeEvent:
    def __init__(self, runtime: FakeRuntime) -> None:
        self.runtime = runtime
        runtime.recorded_on.append(threading.current_thread().name)

    def synchronize(self) -> None:
        self.runtime.waited_on.append(threading.current_thread().name)


class FakeRuntime(device_copy.CudaRuntime):
    def __init__(self) -> None:
        self.recorded_on: list[str] = []
        self.waited_on: list[str] = []

    def pinned_like(self, flat: torch.Tensor) -> torch.Tensor:
        assert not flat.requires_grad, "the copy is detached"
        return torch.empty(flat.shape, dtype=flat.dtype)

    def record_event(self, device) -> FakeEvent:
        return FakeEvent(self)


@pytest.fixture
def runtime(monkeypatch) -> FakeRuntime:
    fake = FakeRuntime()
    monkeypatch.setattr(device_copy, "cuda", fake)
    training = threading.main_thread()

    def refuse_on_training_thread(name, original):
        def guarded(*args, **kwargs):
            if threading.current_thread() is training:
                raise AssertionError(f"{name} called on the training thread")
            return original(*args, **kwargs)
        return guarded

    monkeypatch.setattr(torch.cuda, "synchronize", refuse_on_training_thread("torch.cuda.synchronize",
                                                                             torch.cuda.synchronize))
    for method in ("item", "tolist", "__float__"):
        monkeypatch.setattr(torch.Tensor, method, refuse_on_training_thread(f"Tensor.{method}",
                                                                            getattr(torch.Tensor, method)))
    return fake


def test_cuda_tensors_are_copied_without_a_sync_and_read_by_the_writer(runtime, sqlite_url, tmp_path):
    weight = torch.tensor([0.5, 1.5], requires_grad=True)
    kept = []
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        for step in range(5):
            loss = cuda_like((weight * (step + 1)).sum())  # carries an autograd graph
            metrics = {f"train/m{i}": cuda_like(torch.tensor(float(i + step))) for i in range(8)}
            metrics["train/loss"] = loss
            metrics["train/tokens"] = cuda_like(torch.tensor(4096 * step, dtype=torch.int64))
            mon.log(step, metrics)
            kept.append(weakref.ref(loss))
            del loss, metrics
            gc.collect()
            assert kept[-1]() is None, "log() keeps no reference to the tensor (nor to its graph)"
        # One copy and one event per call for each dtype (float32 and int64), all on this thread.
        assert runtime.recorded_on == ["MainThread"] * 10
        assert runtime.waited_on == [] or set(runtime.waited_on) == {"gapwatch-writer-r"}
    assert set(runtime.waited_on) == {"gapwatch-writer-r"} and len(runtime.waited_on) == 10
    with open_store(sqlite_url) as store:
        data = store.load_run("r").scalars
    assert data["train/loss"].tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert data["train/tokens"].tolist() == [0.0, 4096.0, 8192.0, 12288.0, 16384.0]
    assert data["train/m7"].tolist() == [7.0, 8.0, 9.0, 10.0, 11.0]


def test_the_guard_would_catch_a_read_on_the_training_thread(runtime):
    with pytest.raises(AssertionError, match="Tensor.item called on the training thread"):
        torch.tensor(1.0).item()
    with pytest.raises(AssertionError, match="torch.cuda.synchronize called on the training thread"):
        torch.cuda.synchronize()
