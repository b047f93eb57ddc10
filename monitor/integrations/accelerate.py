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

from typing import Any

from monitor import schema
from monitor.integrations.names import KeyMapper, hand_named
from monitor.integrations.session import LazyRun, RunSpec

try:
    from accelerate.tracking import GeneralTracker
except ImportError as exc:  # the core installs without it: say which extra brings it
    raise ImportError("gapwatch's Accelerate integration needs accelerate: "
                      "pip install 'gapwatch[accelerate]'") from exc


class GapwatchTracker(GeneralTracker):
    name = "gapwatch"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run: str, store: Any = None, *, eval_set: str = "val", **run_args: Any) -> None:
        """`run`, `store` and the keyword arguments as for the Lightning logger (`reference`,
        `reference_source`, `reference_profile`, `config`, then any `Monitor` argument: project,
        settings, ...); `eval_set` names the held-out set of `val_loss` and `eval_loss`."""
        super().__init__()
        self.session = LazyRun(RunSpec.of(run, store, **run_args))
        self._names = KeyMapper(hand_named(eval_set))
        self._last_step: int | None = None

    @property
    def tracker(self) -> Any:
        """The Monitor of this run (a NullMonitor before the first `log()` and after `finish()`)."""
        return self.session.monitor

    def store_init_configuration(self, values: dict) -> None:
        # init_trackers calls this before any log(): the Monitor opens with it.
        self.session.config.update(values)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """`values` at `step`; without a step, one past the last one logged (0 first), as a loop
        that calls `log()` once a step means."""
        step = (0 if self._last_step is None else self._last_step + 1) if step is None else int(step)
        mapped = self._names.metrics({k: v for k, v in values.items() if not isinstance(v, (str, bytes))})
        self._last_step = step
        if mapped:
            self.session.opened().log(step, mapped)

    def finish(self) -> None:
        self.session.close(schema.RunStatus.FINISHED)
        self._last_step = None
