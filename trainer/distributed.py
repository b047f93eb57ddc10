"""Processes, devices and the data-parallel mesh.

Several processes (hosts) join through `jax.distributed.initialize`; on CPU they talk through
gloo collectives (JAX's default CPU collectives). Every process sees every device; the mesh lists
them process by process, so that the rows of the global batch a process feeds land on its own
devices, and the data hosts are split over processes in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh

from monitor.errors import GapwatchError
from trainer.step import DATA_AXIS


@dataclass(frozen=True)
class DistributedConfig:
    """How this process joins a multi-process job (all None/1: a single process)."""

    coordinator: str | None = None
    """host:port of process 0's coordinator service (e.g. 127.0.0.1:12345)."""
    num_processes: int = 1
    """Processes in the job."""
    process_id: int = 0
    """This process's index, 0..num_processes-1."""


def initialize(config: DistributedConfig) -> None:
    """Join the job before any other JAX call; a no-op for a single process."""
    if config.num_processes <= 1:
        return
    if not config.coordinator:
        raise GapwatchError("a multi-process run needs --coordinator HOST:PORT")
    jax.distributed.initialize(coordinator_address=config.coordinator,
                               num_processes=config.num_processes, process_id=config.process_id)


def data_parallel_mesh() -> Mesh:
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return Mesh(np.array(devices), (DATA_AXIS,))


def local_data_hosts(data_hosts: int) -> range:
    """The contiguous block of data hosts this process plays."""
    processes = jax.process_count()
    if data_hosts % processes:
        raise GapwatchError(f"data_hosts {data_hosts} is not a multiple of the {processes} processes")
    per = data_hosts // processes
    return range(jax.process_index() * per, (jax.process_index() + 1) * per)
