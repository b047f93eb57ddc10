"""gapwatch for the Hugging Face `Trainer`: `callbacks=[GapwatchCallback("my-run", reference=...)]`.

The Trainer's own names become gapwatch keys at `state.global_step`: `loss`, `learning_rate`,
`grad_norm`, `epoch` and `num_input_tokens_seen` from `on_log`; `eval_loss` and each
`eval_<set>_loss` (an `eval_dataset` dict) as held-out sets from `on_evaluate`. Each save is a
checkpoint event; each `train()` opens a new attempt of the run, one resumed from a checkpoint with
a resume event. The configuration recorded is the `TrainingArguments`, the global batch size (and,
given `sequence_length`, the tokens per step) and the records of the training set.

`report_to="gapwatch"` is not offered: the Trainer builds its `report_to` integrations from a fixed
table and with no arguments, and a run needs at least its name.
"""

from __future__ import annotations

import os
import re
from typing import Any

from monitor import schema
from monitor.client import NullMonitor
from monitor.importers.profiles import Profile, Rule
from monitor.integrations.names import KeyMapper
from monitor.integrations.session import RunSpec

try:
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as exc:  # the core installs without it: say which extra brings it
    raise ImportError("gapwatch's Hugging Face integration needs transformers: "
                      "pip install 'gapwatch[transformers]'") from exc

# The end-of-training summary `train()` logs once: averages over the whole run, not a step's values.
_SUMMARY = r"train_runtime|train_samples_per_second|train_steps_per_second|train_loss|total_flos"

TRAIN_NAMES = Profile(
    name="transformers",
    description="the Hugging Face Trainer's on_log names",
    rules=(
        Rule(r"loss", schema.TRAIN_LOSS),
        Rule(r"learning_rate", schema.OPTIM_LR),
        Rule(r"grad_norm", schema.TRAIN_GRAD_NORM),
        Rule(r"epoch", schema.DATA_EPOCH),
        Rule(r"num_input_tokens_seen", schema.TRAIN_TOKENS),
        Rule(_SUMMARY, None),
    ),
)


def eval_names(default_set: str) -> Profile:
    """The Trainer's evaluation metrics: `eval_loss` is the held-out set `default_set`; a dict of
    eval datasets prefixes each one's metrics with `eval_<name>_`."""
    return Profile(
        name="transformers-eval",
        description="the Hugging Face Trainer's on_evaluate names",
        rules=(
            Rule(r"eval_loss", schema.heldout_key(default_set)),
            Rule(r"eval_(?P<set>.+)_loss", "eval/heldout/{set}/loss"),
            # Timings of the evaluation loop itself, and the epoch on_log already has.
            Rule(r"eval_(.+_)?(runtime|samples_per_second|steps_per_second|model_preparation_time)", None),
            Rule(r"epoch", None),
            Rule(r"eval_(?P<name>.+)", "eval/{name}"),
        ),
    )


class GapwatchCallback(TrainerCallback):
    def __init__(self, run: str, store: Any = None, *, reference: str | None = None,
                 reference_source: str | os.PathLike | None = None, reference_profile: str | None = None,
                 eval_set: str = "eval", sequence_length: int | None = None,
                 config: dict[str, Any] | None = None, **monitor_args: Any) -> None:
        """`run` and `store` as for `Monitor`; `reference` names the reference run, imported from
        `reference_source` (with `reference_profile`) when the store lacks it. `eval_set` names the
        held-out set of a single `eval_dataset` ("eval", as the `hf` profile names the `eval_loss` of
        this Trainer's W&B, TensorBoard or trainer_state.json, so a reference read from them pairs); `sequence_length` (tokens per record) gives the
        tokens per step. Other keyword arguments go to `Monitor` (project, settings, ...)."""
        self.spec = RunSpec(run, store, reference, reference_source, reference_profile, dict(config or {}),
                            monitor_args)
        self.sequence_length = sequence_length
        self.monitor: Any = NullMonitor()
        self._train = KeyMapper(TRAIN_NAMES)
        self._eval = KeyMapper(eval_names(eval_set))

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if not state.is_world_process_zero:
            return
        self.monitor.close()
        config = _run_config(args, train_dataloader, self.sequence_length)
        self.monitor = self.spec.open(config)
        if state.global_step > 0:  # resumed from a checkpoint
            self.monitor.event(schema.EventKind.RESUME, state.global_step, restored_step=state.global_step,
                               global_batch_size=config[schema.CONFIG_GLOBAL_BATCH_SIZE])
        else:
            self.monitor.event(schema.EventKind.RUN_START, 0, config=config)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        # Evaluation metrics come through on_evaluate too, with the set names: taken there.
        train = {k: v for k, v in logs.items() if not k.startswith(("eval_", "test_"))}
        metrics = self._train.metrics(train)
        if metrics:
            self.monitor.log(state.global_step, metrics)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not state.is_world_process_zero or not metrics:
            return
        mapped = self._eval.metrics(metrics)
        if mapped:
            self.monitor.log(state.global_step, mapped)
            sets = sorted({m.group(1) for k in mapped if (m := re.match(r"eval/heldout/([^/]+)/", k))})
            self.monitor.event(schema.EventKind.EVAL, state.global_step, eval="heldout", sets=sets)

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        self.monitor.event(schema.EventKind.CHECKPOINT, state.global_step, path=path)

    def on_train_end(self, args, state, control, **kwargs):
        self.monitor.close(schema.RunStatus.FINISHED)
        self.monitor = NullMonitor()


def _run_config(args, train_dataloader, sequence_length: int | None) -> dict[str, Any]:
    global_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)
    config: dict[str, Any] = {**args.to_dict(), schema.CONFIG_GLOBAL_BATCH_SIZE: global_batch}
    dataset = getattr(train_dataloader, "dataset", None)
    try:
        config[schema.CONFIG_RECORDS_PER_EPOCH] = len(dataset)
    except TypeError:  # an iterable dataset: no length
        pass
    if sequence_length is not None:
        config[schema.CONFIG_TOKENS_PER_STEP] = global_batch * sequence_length
    return config
