"""gapwatch for Hugging Face Accelerate: `Accelerator(log_with=[GapwatchTracker("my-run", reference=...)])`.

A custom training loop under Accelerate logs with `accelerator.log(values, step=...)`, on the main
process only. The names become gapwatch keys as Lightning's do (`names.hand_named`): `train_loss`,
`train/loss` and `loss` the training loss; `val_loss`, `eval_loss` and `val/loss` the held-out set
`eval_set`, `val_<set>_loss` the held-out set <set>; `lr`, grad norms, `epoch`, `tokens`; anything
else under its own name. Text values (Accelerate lets a tracker log strings) are not metrics and are
left out. The `config` of `accelerator.init_trackers(project, config=...)` is the run's
configuration; the Monitor opens at the first `log()`, so each script run is a new attempt of the
run, and `accelerator.end_training()` closes it.
"""

from __future__ import annotations

import os
from typing import Any

from monitor import schema
from monitor.client import NullMonitor
from monitor.integrations.names import KeyMapper, hand_named
from monitor.integrations.session import RunSpec

try:
    from accelerate.tracking import GeneralTracker
except ImportError as exc:  # the core installs without it: say which extra brings it
    raise ImportError("gapwatch's Accelerate integration needs accelerate: "
                      "pip install 'gapwatch[accelerate]'") from exc


class GapwatchTracker(GeneralTracker):
    name = "gapwatch"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run: str, store: Any = None, *, reference: str | None = None,
                 reference_source: str | os.PathLike | None = None, reference_profile: str | None = None,
                 eval_set: str = "val", config: dict[str, Any] | None = None, **monitor_args: Any) -> None:
        """`run` and `store` as for `Monitor`; `reference` names the reference run, imported from
        `reference_source` (with `reference_profile`) when the store lacks it. `eval_set` names the
        held-out set of `val_loss`. Other keyword arguments go to `Monitor` (project, settings, ...)."""
        super().__init__()
        self.spec = RunSpec(run, store, reference, reference_source, reference_profile, dict(config or {}),
                            monitor_args)
        self.monitor: Any = NullMonitor(run)
        self._open = False
        self._config: dict[str, Any] = {}
        self._names = KeyMapper(hand_named(eval_set))
        self._last_step: int | None = None

    @property
    def tracker(self) -> Any:
        """The Monitor of this run (a NullMonitor before the first `log()` and after `finish()`)."""
        return self.monitor

    def store_init_configuration(self, values: dict) -> None:
        # init_trackers calls this before any log(): the Monitor opens with it.
        self._config.update(values)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """`values` at `step`; without a step, one past the last one logged (0 first), as a loop
        that calls `log()` once a step means."""
        step = (0 if self._last_step is None else self._last_step + 1) if step is None else int(step)
        mapped = self._names.metrics({k: v for k, v in values.items() if not isinstance(v, (str, bytes))})
        self._last_step = step
        if mapped:
            if not self._open:
                self.monitor = self.spec.open(self._config)
                self._open = True
            self.monitor.log(step, mapped)

    def finish(self) -> None:
        if self._open:
            self.monitor.close(schema.RunStatus.FINISHED)
        self.monitor = NullMonitor(self.spec.run)
        self._open = False
        self._last_step = None
