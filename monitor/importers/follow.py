"""`import --follow`: keep a store run up to date with a source that is still growing.

Each poll writes what is new, in its own transaction (so a reader sees whole polls only):
* `.wandb` files are read from where the last poll stopped (a chunk still being written is left
  for the next poll), and following ends when the file's exit record arrives;
* W&B runs on a server are asked for the steps after the last one imported, and following ends
  when the run's state is finished, crashed, failed or killed;
* both are put on the trainer's step as a whole import puts them (`step_axis.StepAxisInParts`:
  the step key is chosen from the first poll that finds rows);
* a format with a `tail` reader (the trainers' console logs: Megatron-LM's, fairseq's,
  Composer's, OLMo-core's, torchtitan's, MaxText's, llm.c's and its family's; line_tail.py) is
  read from the last whole line the last poll read;
* every other format is read again from its start (JSONL and CSV logs chunk by chunk, the rest
  whole); the store writer takes only the rows after those it already has (they grow by
  appending), and following ends after `idle_timeout_s` without new rows, if set.
Ctrl-C stops following between polls; nothing half-written stays behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd


from . import remote_copy
from .imported_run import ImportedRun
from .normalize import apply_profile
from .meaning import cadences, pick_profile
from .profiles import Profile, get_profile
from .sample_steps import SampleSteps
from .step_axis import StepAxisInParts
from .store_writer import import_state, write_run
from .table_import import import_table


@dataclass
class FollowConfig:
    """How often and how long a growing source is followed."""

    poll_interval_s: float = 30.0  # W&B's own history uploads every ~15-30 s; polling faster
    # than that mostly finds nothing new
    idle_timeout_s: float | None = None  # stop after this long without new rows (None: never)
    max_polls: int | None = None  # stop after this many polls (None: no limit)


@dataclass
class FollowPoll:
    poll: int
    rows_new: int
    rows_total: int
    finished: bool


def follow(store, name: str, source: str, fmt: str, *, profile: str | Profile | None = None,
           load_kwargs: dict | None = None, write_kwargs: dict | None = None,
           config: FollowConfig | None = None, api_config=None,
           on_poll: Callable[[FollowPoll], None] | None = None,
           sleep: Callable[[float], None] = time.sleep) -> FollowPoll:
    """Poll `source` into run `name` until it is done or a limit is reached; the last result."""
    config = config or FollowConfig()
    load_kwargs = dict(load_kwargs or {})
    write_kwargs = dict(write_kwargs or {})
    from . import get_format

    streamed = get_format(fmt).streamed
    url = source if remote_copy.is_remote(source) else None
    source = remote_copy.local_copy(url) if url else source
    poller = None if streamed else _poller(store, name, source, fmt, profile, load_kwargs, api_config)
    poll = 0
    idle_since = time.monotonic()
    while True:
        poll += 1
        if url and poll > 1:
            remote_copy.local_copy(url)  # a bucket's source is read from its copy, brought up to date
        if streamed:
            # Read chunk by chunk at each poll: the rows imported before are recognised as they
            # stream past, never held whole.
            result, _ = import_table(store, name, source, fmt, profile, **load_kwargs,
                                     **write_kwargs)
            finished = False
        else:
            run, previous, finished = poller()
            result = write_run(store, name, run, previous_rows=previous, **write_kwargs)
        # Only the first poll names the run it is the reference of.
        write_kwargs.pop("reference_of", None)
        outcome = FollowPoll(poll, result.rows_new, result.rows_total, finished)
        if on_poll is not None:
            on_poll(outcome)
        if result.rows_new:
            idle_since = time.monotonic()
        if finished:
            return outcome
        if config.max_polls is not None and poll >= config.max_polls:
            return outcome
        if (config.idle_timeout_s is not None
                and time.monotonic() - idle_since >= config.idle_timeout_s):
            return outcome
        sleep(config.poll_interval_s)


def _poller(store, name, source, fmt, profile, load_kwargs, api_config):
    """A function returning (ImportedRun to write, previous_rows or None, source finished)."""
    if fmt == "wandb-file":
        return _WandbFilePoller(source, profile, load_kwargs)
    if fmt == "wandb-api":
        return _WandbApiPoller(store, name, source, profile, load_kwargs, api_config)
    from . import get_format, load

    tail = get_format(fmt).tail
    if tail is not None:
        return _TailPoller(tail(source), profile, load_kwargs, prefer=get_format(fmt).profile)

    def reload():
        return load(source, profile, fmt=fmt, **load_kwargs), None, False

    return reload


class _WandbFilePoller:
    def __init__(self, source, profile, load_kwargs) -> None:
        from .wandb.run_file import WandbRunReader, find_run_file

        self.reader = WandbRunReader(find_run_file(source))
        self._settings(profile, load_kwargs)
        self.rows = 0
        self.first = True

    def _settings(self, profile, load_kwargs) -> None:
        self.user_file = load_kwargs.get("profiles_file")
        self.tokens_per_step = load_kwargs.get("tokens_per_step")
        self.profile = get_profile(profile, self.user_file) if isinstance(profile, str) and (
            profile) else profile
        named_key = self.profile.step_key if isinstance(self.profile, Profile) else None
        self.axis = StepAxisInParts(load_kwargs.get("step_key") or named_key)
        self.samples = SampleSteps()
        self.prefer: str | None = None  # the profile preferred on a tie: the format's own

    def __call__(self):
        from .wandb.run_file import to_imported

        previous = None if self.first else self.rows
        new = self.reader.read(follow=True)
        run = to_imported(self.reader, new)
        run = self._map(run)
        self.first = False
        self.rows += len(run.scalars)
        return run, previous, self.reader.finished

    def _map(self, run: ImportedRun) -> ImportedRun:
        return self._named(self._on_steps(self.axis.apply(run)))

    def _on_steps(self, run: ImportedRun) -> ImportedRun:
        """DeepSpeed's series by samples placed on steps as a whole import places them; their rows
        wait for the poll that shows the spacing (see sample_steps)."""
        run.scalars = self.samples.place(run.scalars, final=self.reader.finished)
        run.events = self.samples.events(run.events)
        return run

    def _named(self, run: ImportedRun) -> ImportedRun:
        """The run under its profile, chosen from the first rows read as a whole import chooses it."""
        if self.tokens_per_step is not None:
            run.tokens_per_step = float(self.tokens_per_step)
        if not isinstance(self.profile, Profile):
            if not len(run.scalars):
                return run  # nothing logged yet: the profile is chosen from the first rows
            # As a whole import chooses it, on what the first poll found.
            names = [str(n) for n in pd.unique(run.scalars["key"])]
            self.profile, _ = pick_profile(None, names, cadences(run.scalars), prefer=run.profile or self.prefer,
                                           user_file=self.user_file)
        return apply_profile(run, self.profile)


class _TailPoller(_WandbFilePoller):
    """A format whose `tail` reader reads on from where it stopped, on the trainer's own steps."""

    def __init__(self, reader, profile, load_kwargs, prefer: str | None) -> None:
        self.reader = reader
        self._settings(profile, load_kwargs)
        self.prefer = prefer
        self.rows = 0
        self.first = True

    def __call__(self):
        previous = None if self.first else self.rows
        run = self._named(self.reader.read())
        self.first = False
        self.rows += len(run.scalars)
        return run, previous, False


class _WandbApiPoller(_WandbFilePoller):
    def __init__(self, store, name, source, profile, load_kwargs, api_config) -> None:
        from .wandb.api import ApiConfig, WandbApiReader

        self.reader = WandbApiReader(source, api_config or ApiConfig())
        self._settings(profile, load_kwargs)
        state = import_state(store, name)
        # Carry on after the last step an earlier import of this run took.
        if state and state.get("source") == source and state.get("last_step") is not None:
            self.reader.last_step = int(state["last_step"])
            self.rows = int(state.get("rows", 0))
            self.first = False
        else:
            self.rows = 0
            self.first = True

    def __call__(self):
        from .wandb.api import to_imported

        previous = None if self.first else self.rows
        steps, keys, values, walls = self.reader.read()
        run = self._map(to_imported(self.reader, steps, keys, values, walls))
        self.first = False
        self.rows += len(run.scalars)
        return run, previous, self.reader.finished


__all__ = ["FollowConfig", "FollowPoll", "follow"]
