"""The index sampler OLMo's data loader uses: each host shards a fresh global shuffle by itself.

Every epoch has its own permutation of all records (seeded by the run seed and the epoch); host
`h` of `H` reads positions `h, h + H, h + 2H, ...` of it, so in one epoch the hosts together read
every record exactly once. The sampler implements Grain's `Sampler` protocol (`__getitem__` returning
`RecordMetadata`), and the DataLoader must then be given `NoSharding()`.

Giving the DataLoader `ShardOptions(h, H)` as well (the double-sharding bug) makes it read only
every H-th index of this sampler: the cursor advances H times too fast, each nominal epoch walks
through H of the sampler's epochs, and the run samples the corpus with replacement.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
from grain import RecordMetadata


class HostShardedSampler:
    def __init__(self, num_records: int, host_index: int, host_count: int, seed: int) -> None:
        if not 0 <= host_index < host_count:
            raise ValueError(f"host_index {host_index} is outside 0..{host_count - 1}")
        if num_records < host_count:
            raise ValueError(f"{num_records} records cannot feed {host_count} data hosts")
        self.num_records = num_records
        self.host_index = host_index
        self.host_count = host_count
        self.seed = seed
        # Records past the last full round of hosts are dropped each epoch, so all hosts stay equal.
        self.per_host = num_records // host_count

    def __len__(self) -> int:
        return sys.maxsize  # epochs repeat without end; the trainer decides when to stop

    def __repr__(self) -> str:
        # Grain compares this string with the checkpoint's before restoring loader state.
        return (f"HostShardedSampler(num_records={self.num_records}, host_index={self.host_index}, "
                f"host_count={self.host_count}, seed={self.seed})")

    def __getitem__(self, index: int) -> RecordMetadata:
        if index < 0:
            raise IndexError(f"sampler index {index} is negative")
        epoch, position = divmod(index, self.per_host)
        key = epoch_permutation(self.num_records, self.seed, epoch)[
            self.host_index + position * self.host_count]
        return RecordMetadata(index=index, record_key=int(key))


# Shared by all hosts of a process (they read the same epochs); indices only move forward, and even
# double-sharded hosts read at most two epochs at a time, so a few entries suffice.
@functools.lru_cache(maxsize=8)
def epoch_permutation(num_records: int, seed: int, epoch: int) -> np.ndarray:
    """The global order of records in `epoch`, the same on every host."""
    return np.random.default_rng([seed, epoch]).permutation(num_records)
