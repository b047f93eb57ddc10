"""The training data pipeline: packed records read through Grain by a configurable number of hosts.

A run has `data_hosts` data hosts, independent of how many JAX processes there are: each process
plays a contiguous block of them (one process can play all 32 hosts of a 32-host job and read
exactly what those hosts would). Every host has its own Grain `DataLoader` over the same records,
with an OLMo-style `HostShardedSampler` (trainer/sampler.py) and `NoSharding()`; each step it yields
`global_batch_size / data_hosts` records. The global batch is the hosts' batches in host order,
whatever the number of devices, so a run resumed on another device count reads the same data.

Each host's Grain iterator state is what the checkpoint stores (`state()`/`restore()`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import grain
import numpy as np

from monitor.errors import GapwatchError
from trainer.packing import CorpusSpec
from trainer.sampler import HostShardedSampler


@dataclass(frozen=True)
class DataConfig:
    """Batching and sharding of the training data."""

    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    """What text to train on and how it is split (trainer/packing.py)."""
    global_batch_size: int = 8
    """Records (sequences) per optimizer step, summed over all data hosts and devices."""
    data_hosts: int = 1
    """Data hosts the loader plays; a multiple of the JAX process count."""
    cache_dir: str | None = None
    """Where packed corpora are cached (default: the per-user cache directory)."""


class RecordSource:
    """Grain random-access source over packed records; an element is its tokens and its id."""

    def __init__(self, records: np.ndarray, corpus_key: str) -> None:
        self._records = records
        self._corpus_key = corpus_key

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, key: int) -> dict[str, np.ndarray]:
        return {"tokens": self._records[key], "record": np.int32(key)}

    def __repr__(self) -> str:
        # Grain checks this against the checkpoint, so a resume on another corpus fails loudly.
        return f"RecordSource(corpus={self._corpus_key}, records={len(self._records)})"


def usable_records(num_records: int, data_hosts: int) -> int:
    """Records per epoch: whole rounds of hosts only, so every host reads the same number."""
    return (num_records // data_hosts) * data_hosts


class DataHosts:
    """The data hosts this process plays, read in lockstep: one batch each per step."""

    def __init__(
        self,
        records: np.ndarray,
        corpus_key: str,
        config: DataConfig,
        seed: int,
        host_ids: range,
        *,
        loader_shard_options: bool = False,
        before_read: Callable[[int, int], None] | None = None,
    ) -> None:
        """`loader_shard_options=True` also hands the DataLoader `ShardOptions(h, H)`: the
        double-sharding bug (trainer/faults.py). `before_read(step, host)` runs before each host's
        read (the slow-host fault stalls there)."""
        hosts = config.data_hosts
        if config.global_batch_size % hosts:
            raise GapwatchError(f"global_batch_size {config.global_batch_size} is not a multiple of "
                                f"data_hosts {hosts}")
        n = usable_records(len(records), hosts)
        if n < config.global_batch_size:
            raise GapwatchError(f"corpus has {len(records)} records, fewer than one global batch of "
                                f"{config.global_batch_size}")
        self.records_per_epoch = n
        self.per_host_batch = config.global_batch_size // hosts
        self.host_ids = host_ids
        self.host_count = hosts
        self._before_read = before_read
        source = RecordSource(records[:n], corpus_key)
        self._loaders = {}
        for h in host_ids:
            sampler = HostShardedSampler(n, h, hosts, seed)
            shard = (grain.sharding.ShardOptions(h, hosts) if loader_shard_options
                     else grain.sharding.NoSharding())
            self._loaders[h] = grain.DataLoader(
                data_source=source,
                sampler=sampler,
                operations=[grain.transforms.Batch(self.per_host_batch, drop_remainder=True)],
                worker_count=0,
                shard_options=shard,
                # Records are in memory: reader threads would only contend for the GIL.
                read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
            )
        self._iters = {h: iter(loader) for h, loader in self._loaders.items()}

    def next_batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's rows of the global batch for `step`, hosts in order.

        `tokens` [rows, seq_len + 1] int32; `record` [rows] the record ids (for coverage);
        `position` [rows]: on each host's last row, that host's loader position after this batch
        (the sampler slots it has passed), zero elsewhere, so that summing the column over the
        global batch gives the global data cursor without any extra communication.
        """
        tokens, record, position = [], [], []
        for h, it in self._iters.items():
            if self._before_read is not None:
                self._before_read(step, h)
            batch = next(it)
            tokens.append(batch["tokens"])
            record.append(batch["record"])
            pos = np.zeros(self.per_host_batch, np.int32)
            pos[-1] = self.host_position(h)
            position.append(pos)
        return {"tokens": np.concatenate(tokens), "record": np.concatenate(record),
                "position": np.concatenate(position)}

    def host_position(self, host: int) -> int:
        """Sampler slots host `host` has passed: one past the last index its loader read."""
        state = json.loads(self._iters[host].get_state())
        return int(state["last_seen_indices"]["0"]) + 1

    def state(self) -> dict[str, str]:
        """Each host's Grain iterator state (JSON text), keyed by host index."""
        return {str(h): it.get_state().decode() for h, it in self._iters.items()}

    def restore(self, states: dict[str, str]) -> None:
        for h, it in self._iters.items():
            if str(h) not in states:
                raise GapwatchError(f"checkpoint has no loader state for data host {h}")
            try:
                it.set_state(states[str(h)].encode())
            except ValueError as exc:
                first = str(exc).splitlines()[0]
                raise GapwatchError(f"checkpoint's loader state does not fit this data setup: {first}") from None
