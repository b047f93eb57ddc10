"""Fault injection: each fault is a real bug's code path inside the trainer, never a faked metric.

- `double-sharding`: the DataLoader is also given `ShardOptions(h, H)` while the OLMo-style sampler
  already shards by host (trainer/data.py). Each loader then reads every H-th sampler index: the
  cursor advances H times too fast and, for many hosts, the run resamples with replacement
  (one nominal epoch: ~37% of records unseen, ~37% once, ~26% twice or more).
- `resume-off-by-one`: on resume the model's step is restored as N+1 while the data loader resumes
  at batch N (trainer/loop.py), shifting the run against its data and schedule by one step.
- `loss-spike`: the learning-rate schedule is multiplied by `spike_factor` for `spike_steps` steps
  from `at_step` (trainer/optim.py applies whatever rate the schedule gives).
- `nan`: the batch of step `at_step` carries a token id past the vocabulary, as a corrupt shard
  would; the embedding lookup turns it into NaN (trainer/model.py) and the loss goes NaN for real.
- `slow-host`: data host `slow_host` stalls `stall_s` seconds before its read every `stall_every`
  steps from `at_step`, as a host with a failing disk or a noisy neighbour does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from monitor.errors import GapwatchError

NAMES = ("double-sharding", "resume-off-by-one", "loss-spike", "nan", "slow-host")


@dataclass(frozen=True)
class FaultConfig:
    """Which fault to inject, and when."""

    name: str | None = None
    """One of NAMES, or None for a clean run."""
    at_step: int = 100
    """First step the loss-spike, nan and slow-host faults act on."""
    spike_factor: float = 30.0
    """Learning-rate multiplier of the loss-spike fault."""
    spike_steps: int = 3
    """Steps the loss-spike fault lasts."""
    slow_host: int = 0
    """Data host the slow-host fault stalls."""
    stall_s: float = 1.0
    """Seconds of each stall."""
    stall_every: int = 10
    """Steps between stalls."""

    def __post_init__(self) -> None:
        if self.name is not None and self.name not in NAMES:
            raise GapwatchError(f"fault {self.name!r} is unknown; choose one of {', '.join(NAMES)}")


class Faults:
    """The hooks the trainer calls at the places where the real bugs live; all no-ops when clean."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self.name = config.name

    @property
    def loader_shard_options(self) -> bool:
        """Hand the DataLoader ShardOptions too (double sharding)."""
        return self.name == "double-sharding"

    def restored_step(self, saved_step: int) -> int:
        """The step a resumed model is given: the saved one, or one more (resume-off-by-one)."""
        return saved_step + 1 if self.name == "resume-off-by-one" else saved_step

    def lr_scale(self, step: jax.Array) -> jax.Array:
        """Multiplier of the learning rate at `step` (0-based update index).

        The same computation runs in every run (an empty window when there is no spike), so clean
        and faulty runs compile the same program and share compilation caches.
        """
        spiking = self.name == "loss-spike"
        first = self.config.at_step - 1  # at_step counts from 1 like logged steps
        length = self.config.spike_steps if spiking else 0
        inside = (step >= first) & (step < first + length)
        return jnp.where(inside, jnp.float32(self.config.spike_factor), jnp.float32(1.0))

    def poison(self, step: int, tokens: np.ndarray, vocab_size: int) -> None:
        """Corrupt one token of the batch of `step` in place (nan)."""
        if self.name == "nan" and step == self.config.at_step and tokens.size:
            tokens[0, 0] = vocab_size

    def before_read(self, step: int, host: int) -> None:
        """Stall the slow host's read on the affected steps (slow-host)."""
        c = self.config
        if (self.name == "slow-host" and host == c.slow_host and step >= c.at_step
                and (step - c.at_step) % c.stall_every == 0):
            time.sleep(c.stall_s)
