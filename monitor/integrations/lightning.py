"""gapwatch for Lightning: `Trainer(logger=GapwatchLogger("my-run", reference=...))`.

Lightning hands a logger the metrics of `self.log(...)` at the trainer's step; their names become
gapwatch keys: `train_loss`, `train/loss` and `loss` (and Lightning's `_step` forms) the training
loss; `val_loss` and `val/loss` the held-out set `eval_set`, `val_<set>_loss` and `val/<set>/loss`
the held-out set <set>; `lr`, `lr-<Optimizer>` (LearningRateMonitor) the learning rate; grad norms
and `epoch`. The hyperparameters are the run's configuration. Each checkpoint `ModelCheckpoint`
saves is a checkpoint event. Each `fit()` opens a new attempt of the run; the logger closes it when
Lightning finalizes the fit.
"""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Any

from monitor import schema
from monitor.integrations.names import KeyMapper, hand_named
from monitor.integrations.session import LazyRun, RunSpec

try:
    from lightning.pytorch.loggers.logger import Logger
    from lightning.pytorch.utilities.rank_zero import rank_zero_only
except ImportError as exc:  # the core installs without it: say which extra brings it
    raise ImportError("gapwatch's Lightning integration needs lightning: pip install 'gapwatch[lightning]'") from exc


class GapwatchLogger(Logger):
    def __init__(self, run: str, store: Any = None, *, reference: str | None = None,
                 reference_source: str | os.PathLike | None = None, reference_profile: str | None = None,
                 eval_set: str = "val", config: dict[str, Any] | None = None, **monitor_args: Any) -> None:
        """`run` and `store` as for `Monitor`; `reference` names the reference run, imported from
        `reference_source` (with `reference_profile`) when the store lacks it. `eval_set` names the
        held-out set of `val_loss`. Other keyword arguments go to `Monitor` (project, settings, ...)."""
        super().__init__()
        self.session = LazyRun(RunSpec(run, store, reference, reference_source, reference_profile,
                                       dict(config or {}), monitor_args))
        self._names = KeyMapper(hand_named(eval_set))

    @property
    def name(self) -> str:
        return "gapwatch"

    @property
    def version(self) -> str:
        return self.session.spec.run

    @property
    def experiment(self) -> Any:
        """The Monitor of the current fit (a NullMonitor until the first metric or checkpoint).
        Lightning reads this property while it sets a fit up, before the hyperparameters."""
        return self.session.monitor

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        # Lightning calls this as a fit starts, before any metric: the Monitor opens with them.
        self.session.config.update(vars(params) if isinstance(params, Namespace) else params)

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        # Lightning gives the batches stepped before the batch whose metrics these are; gapwatch's
        # step (as the Hugging Face Trainer's global_step and ModelCheckpoint's) counts that batch.
        mapped = self._names.metrics(metrics)
        if mapped:
            self.session.opened().log(int(step or 0) + 1, mapped)

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        # ModelCheckpoint keeps the step and path of the checkpoint it just saved in these two
        # attributes (not public API; read as Lightning 2.6 names them) before calling loggers.
        step = getattr(checkpoint_callback, "_last_global_step_saved", None)
        path = getattr(checkpoint_callback, "_last_checkpoint_saved", None) or checkpoint_callback.last_model_path
        if step is not None:
            self.session.opened().event(schema.EventKind.CHECKPOINT, int(step), path=str(path))

    @rank_zero_only
    def finalize(self, status: str) -> None:
        failed = status not in ("success", "finished")
        self.session.close(schema.RunStatus.CRASHED if failed else schema.RunStatus.FINISHED)
