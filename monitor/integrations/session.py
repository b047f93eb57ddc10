"""Opening the Monitor of an integration: the run, its reference, and the reference's import.

An integration is constructed before training starts and opens its Monitor when the framework
says training began, so each `train()`/`fit()` (a resume included) is a new attempt of the run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from monitor import schema
from monitor.client import Monitor, NullMonitor
from monitor.errors import GapwatchError

log = logging.getLogger("gapwatch.integrations")


@dataclass
class RunSpec:
    """What an integration was given: the run, where it goes, and what to compare it with."""

    run: str
    store: Any = None
    """A store URL (None: $GAPWATCH_STORE or the default SQLite file) or an open Store."""
    reference: str | None = None
    """The reference run's name in the store."""
    reference_source: str | os.PathLike | None = None
    """A file, folder or wandb:// URL imported as `reference` when the store has no such run yet."""
    reference_profile: str | None = None
    """The importer profile for `reference_source` (None: detected from its metric names)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run's configuration; the integration adds what it reads from the framework."""
    monitor_args: dict[str, Any] = field(default_factory=dict)
    """Any other `Monitor` argument: project, tokens_per_step, settings, flush_interval_s, ..."""

    @classmethod
    def of(cls, run: str, store: Any = None, *, reference: str | None = None,
           reference_source: str | os.PathLike | None = None, reference_profile: str | None = None,
           config: dict[str, Any] | None = None, **monitor_args: Any) -> RunSpec:
        """The spec an integration's keyword arguments give: the ones named here, then any
        `Monitor` argument."""
        return cls(run, store, reference, reference_source, reference_profile, dict(config or {}), monitor_args)

    def __post_init__(self) -> None:
        if self.reference_source is not None and not self.reference:
            raise GapwatchError("reference_source needs reference=, the name the imported run gets")

    def open(self, config: dict[str, Any]) -> Monitor:
        """The Monitor for one attempt, after importing the reference if it is missing. `config` is
        what the framework says; what the caller gave wins over it."""
        if self.reference_source is not None:
            self._import_reference()
        merged = {**config, **self.config}
        args = dict(self.monitor_args)
        if merged.get(schema.CONFIG_TOKENS_PER_STEP) is not None:
            args.setdefault("tokens_per_step", merged[schema.CONFIG_TOKENS_PER_STEP])
        return Monitor(self.run, self.store, config=merged, reference=self.reference, **args)

    def _import_reference(self) -> None:
        from monitor.importers import import_source
        from monitor.store import Store, open_store

        store = self.store if isinstance(self.store, Store) else open_store(self.store)
        try:
            if store.get_run(self.reference) is None:
                import_source(store, self.reference, self.reference_source, self.reference_profile)
                log.info("gapwatch: imported %s as reference run %r", self.reference_source, self.reference)
        finally:
            if store is not self.store:
                store.close()


class LazyRun:
    """The Monitor of a framework that says its configuration before its first metric (Lightning's
    hyperparameters, Accelerate's init_trackers): gathered in `config`, the Monitor opens with it
    at the first metric or checkpoint, and `close()` ends that attempt."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.monitor: Any = NullMonitor(spec.run)
        self.config: dict[str, Any] = {}
        self._open = False

    def opened(self) -> Monitor:
        if not self._open:
            self.monitor = self.spec.open(self.config)
            self._open = True
        return self.monitor

    def close(self, status: schema.RunStatus) -> None:
        """Close the attempt (when one opened) as `status`; the next metric opens another."""
        if self._open:
            self.monitor.close(status)
        self.monitor = NullMonitor(self.spec.run)
        self.config = {}
        self._open = False
