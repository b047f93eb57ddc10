"""Where the trainer's metrics go: the gapwatch store (monitor.client), W&B, the console.

`Sinks` has the logging client's face (`log`, `event`, `close`) and fans out to each sink. The
store client fetches device values on its own thread; the other sinks share one `HostFetcher`
thread that turns device scalars into floats a step or more late, so none of them makes the
training thread wait for the device.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import Any, Protocol

from monitor.client import Monitor, NullMonitor
from monitor.schema import DATA_EPOCH, PERF_TOKENS_PER_S, TRAIN_LOSS, EventKind

MAX_PENDING = 10_000  # queued steps before the fetcher drops the oldest (a sink stuck for minutes)


class HostSink(Protocol):
    """Receives plain floats on the fetcher thread."""

    def write(self, step: int, values: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class HostFetcher:
    """One background thread: device scalars -> floats -> every host sink, in step order."""

    def __init__(self, sinks: list[HostSink]) -> None:
        self.sinks = sinks
        self._queue: queue.Queue = queue.Queue(maxsize=MAX_PENDING)
        self._thread = threading.Thread(target=self._loop, name="gapwatch-host-fetch", daemon=True)
        self._thread.start()

    def put(self, step: int, metrics: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait((step, metrics))
        except queue.Full:  # only this thread adds, so after dropping the oldest there is room
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._queue.put_nowait((step, metrics))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            step, metrics = item
            values = {k: float(v) for k, v in metrics.items()}  # the device fetch, off the loop
            for sink in self.sinks:
                sink.write(step, values)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=120)
        for sink in self.sinks:
            sink.close()


class WandbSink:
    """The same metrics into a W&B run (offline: a local run folder that W&B importers read)."""

    def __init__(self, run: str, mode: str, config: dict, project: str | None,
                 directory: str | None) -> None:
        # W&B must neither post telemetry nor print banners into our progress display.
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self._run = wandb.init(project=project or "gapwatch", name=run, id=_wandb_id(run),
                               mode=mode, config=config, dir=directory, resume="allow")
        self.directory = self._run.dir

    def write(self, step: int, values: dict[str, float]) -> None:
        self._run.log(values, step=step)

    def close(self) -> None:
        self._run.finish()


def _wandb_id(run: str) -> str:
    """W&B run ids allow letters, digits, dashes and underscores only."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in run)[:64]


class ProgressLineSink:
    """A progress line every `every` steps: step, loss, tokens/s, epoch (stderr, for humans)."""

    def __init__(self, total_steps: int, every: int, stream=None) -> None:
        self.total = total_steps
        self.every = max(every, 1)
        self.stream = stream or sys.stderr
        self._last: dict[str, float] = {}
        self._start = time.monotonic()

    def write(self, step: int, values: dict[str, float]) -> None:
        self._last.update(values)
        if TRAIN_LOSS not in values or (step % self.every and step != self.total):
            return  # evals logged at a step add to its line; they do not print one of their own
        v = self._last
        line = (f"step {step:>6}/{self.total}  loss {v.get(TRAIN_LOSS, float('nan')):7.4f}  "
                f"tok/s {v.get(PERF_TOKENS_PER_S, float('nan')):9,.0f}  "
                f"epoch {v.get(DATA_EPOCH, float('nan')):6.3f}  "
                f"elapsed {time.monotonic() - self._start:6.1f}s")
        print(line, file=self.stream, flush=True)

    def close(self) -> None:
        pass


class Sinks:
    """The monitor face over the store client and the host sinks."""

    def __init__(self, monitor: Monitor | NullMonitor, host_sinks: list[HostSink]) -> None:
        self.monitor = monitor
        self.fetcher = HostFetcher(host_sinks) if host_sinks else None

    @property
    def attempt(self) -> int | None:
        return self.monitor.attempt

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.monitor.log(step, metrics)
        if self.fetcher is not None:
            self.fetcher.put(step, metrics)

    def event(self, kind: str | EventKind, step: int, **payload: Any) -> None:
        self.monitor.event(kind, step, **payload)

    def flush(self) -> None:
        """Make everything logged so far durable in the store (or its spool)."""
        self.monitor.flush()

    def close(self, status=None) -> None:
        if self.fetcher is not None:
            self.fetcher.close()
        self.monitor.close(status=status)
