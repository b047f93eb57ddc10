"""Metric-name profiles: how other trainers' metric names map onto gapwatch's keys.

A profile is an ordered list of rules; each rule is a regular expression that must match a whole
source name and either a key template (`eval/heldout/{set}/loss`: named groups are filled in,
each made a valid key part with `monitor.schema.slug`) with an optional scale (MFU logged in
percent becomes a fraction), or `drop` (derived series such as perplexity = exp(loss)).
The first matching rule wins. A name no rule matches is kept under its own name made valid
(`throughput/total_training_Gflops` -> `throughput/total_training_gflops`; a name with no
namespace goes under `extra/`), so nothing a source logged disappears silently. Names starting with
`_` are W&B bookkeeping (`_step`, `_runtime`, `_timestamp`) and never become metrics.

Built-in profiles: `gapwatch` (ours, identity), `olmo` (OLMo and OLMo-core), `maxtext`, `llmc`
(the text logs of llm.c, modded-nanogpt, nanoGPT and torchtune, as `monitor.importers.text_logs`
names them), `nanogpt` (the W&B keys nanoGPT's train.py logs), `hf` (Hugging Face Trainer's W&B
keys), `lightning` (PyTorch Lightning's loggers), `torchtitan`, `megatron` (Megatron-LM),
`composer` (MosaicML Composer, llm-foundry), `nemo` (NVIDIA NeMo), `fairseq` (fairseq and
metaseq, whose losses are in bits), `deepspeed` (DeepSpeed's monitor), `litgpt` (LitGPT, on its
optimizer step: `marked_step_key`), `llamafactory` (LLaMA-Factory's trainer_log.jsonl, on its
`current_steps`), `swift` (ms-swift's logging.jsonl, on its `global_step/max_steps`), `lingua`
(Meta's lingua), `fairseq2` (Meta's fairseq2), `flax` (Flax's examples, through CLU's metric
writers), `levanter` (Stanford CRFM's Levanter, which Marin runs), `t5x` and `t5x-normalized`
(T5X, whose loss is a batch's sum unless its gin config sets a normalizing factor: `t5x_gin`), and
`pax` (Pax's TensorBoard folders). `detect_profile` picks the profile whose own rules explain the
most source names, less those the data contradicts (`monitor.importers.meaning`). A user profile
named like a built-in one with `extends:` its own name overrides single mappings of it. Users add
or replace profiles in a YAML file:
`$GAPWATCH_PROFILES`, else `profiles.yaml` in the per-user config directory (platformdirs):

    profiles:
      mytrainer:
        extends: olmo              # optional: these rules are tried first, then olmo's
        step_key: iteration        # optional: the source column that holds the step
        rules:
          - {match: 'loss/train', key: train/loss}
          - {match: 'val/(?P<set>[^/]+)/loss', key: 'eval/heldout/{set}/loss'}
          - {match: 'mfu_pct', key: perf/mfu, scale: 0.01}
          - {match: 'sys/.*', drop: true}
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from monitor import schema
from monitor.errors import GapwatchError

from . import t5x_gin
from .input_checks import shown

PROFILES_ENV = "GAPWATCH_PROFILES"
PROFILES_FILE_NAME = "profiles.yaml"
UNNAMESPACED_PREFIX = "extra"


@dataclass(frozen=True)
class Rule:
    """One source-name pattern and what becomes of the names it matches."""

    match: str  # regular expression, matched against the whole source name
    key: str | None = None  # key template with {group} fields; None drops the name
    scale: float = 1.0  # multiply values by this (units: percent -> fraction, ms -> s)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", re.compile(self.match))

    def apply(self, name: str) -> tuple[str | None, float] | None:
        """(key or None for dropped, scale), or None when the rule does not match."""
        m = self._regex.fullmatch(name)  # type: ignore[attr-defined]
        if m is None:
            return None
        if self.key is None:
            return None, self.scale
        parts = {k: schema.slug(v) if v else "" for k, v in m.groupdict().items()}
        return self.key.format(**parts), self.scale


@dataclass(frozen=True)
class Profile:
    """A named set of rules; see the module docstring."""

    name: str
    description: str
    rules: tuple[Rule, ...] = ()
    step_key: str | None = None  # source column holding the step, when not the format's own
    marker: str | None = None
    """A pattern some source name must match for detection to pick this profile, whose other rules
    read names that mean something else elsewhere (fairseq's `train/loss` is an epoch's mean in
    bits, any other trainer's the training loss)."""

    def map_name(self, name: str) -> tuple[str | None, float, bool]:
        """(gapwatch key or None if dropped, scale, whether one of this profile's rules matched)."""
        if name.startswith("_"):
            return None, 1.0, False
        for rule in self.rules:
            hit = rule.apply(name)
            if hit is not None:
                return hit[0], hit[1], True
        return default_key(name), 1.0, False

    def mapping(self, names, source: str = "") -> dict[str, tuple[str, float]]:
        """source name -> (key, scale) for every kept name; two names onto one key is an error."""
        out: dict[str, tuple[str, float]] = {}
        taken: dict[str, str] = {}
        for name in names:
            hit = self.map_next(name, taken, source)
            if hit is not None:
                out[name] = hit
        return out

    def map_next(self, name: str, taken: dict[str, str], source: str = "") -> tuple[str, float] | None:
        """(key, scale) of one more source name, None if dropped. `taken` (key -> source name of
        the names mapped before) grows by it; a key taken already is an error."""
        key, scale, _ = self.map_name(name)
        if key is None:
            return None
        if not schema.is_valid_key(key):
            raise GapwatchError(
                f"{source or 'input'}: profile {self.name!r} maps {shown(name)} to {shown(key)}, "
                "which is not a valid metric key"
            )
        if key in taken:
            raise GapwatchError(
                f"{source or 'input'}: profile {self.name!r} maps both {shown(taken[key])} and "
                f"{shown(name)} to {shown(key)}; add a rule to a user profile to tell them apart"
            )
        taken[key] = name
        return key, scale

    def score(self, names) -> int:
        """How many source names this profile's own rules explain (for auto-detection); none
        without a name its `marker` matches."""
        if self.marker is not None and not any(re.fullmatch(self.marker, str(n)) for n in names):
            return 0
        return sum(1 for n in names if self.map_name(n)[2])


def default_key(name: str) -> str | None:
    """A name no rule matched, made a valid key part by part; None if nothing usable is left."""
    parts = [p for p in re.split(r"/+", name.strip()) if p.strip()]
    try:
        parts = [schema.slug(p) for p in parts]
    except ValueError:
        return None
    if not parts:
        return None
    if len(parts) == 1:
        parts = [UNNAMESPACED_PREFIX, *parts]
    key = "/".join(parts)
    return key if schema.is_valid_key(key) else None


# --- built-in profiles --------------------------------------------------------------------------
_HELDOUT = "eval/heldout/{set}/loss"
# OLMo's in-loop downstream metric suffixes (olmo/eval/downstream.py metric types); longest first
# where one is a prefix of another.
_OLMO_DOWNSTREAM_METRICS = "len_norm|pmi_dc|soft_log|soft|acc|f1|bpb|ce_loss|exact_match|ppl"

GAPWATCH = Profile(
    name="gapwatch",
    description="gapwatch's own names (monitor/schema.py), kept as they are",
    rules=tuple(
        [Rule(re.escape(k), k) for k in schema.CORE_KEYS]
        + [
            Rule(r"eval/heldout/(?P<set>[^/]+)/(?P<stat>loss|bpb|stderr|n)",
                 "eval/heldout/{set}/{stat}"),
            Rule(r"eval/downstream/(?P<task>[^/]+)/(?P<metric>[^/]+)/(?P<stat>stderr|n)",
                 "eval/downstream/{task}/{metric}/{stat}"),
            Rule(r"eval/downstream/(?P<task>[^/]+)/(?P<metric>[^/]+)",
                 "eval/downstream/{task}/{metric}"),
        ]
    ),
)

OLMO = Profile(
    name="olmo",
    description="OLMo (allenai/OLMo) and OLMo-core trainers, including their W&B CSV exports",
    rules=(
        Rule(r"train/(CrossEntropyLoss|CE loss)", "train/loss"),
        Rule(r"train/(Perplexity|PPL)", None),  # exp(train loss)
        Rule(r"train/(ZLoss|Z loss)", "train/z_loss"),
        Rule(r"optim/(total_grad_norm|total grad norm)", "train/grad_norm"),
        Rule(r"optim/(learning_rate_group0|LR \(group 0\)|LR)", "optim/lr"),
        Rule(r"optim/learning_rate_group(?P<g>\d+)", "optim/lr_group{g}"),
        Rule(r"optim/LR \(group (?P<g>\d+)\)", "optim/lr_group{g}"),
        Rule(r"learning_rate_peak", "optim/lr_peak"),
        Rule(r"throughput/(total_tokens|total tokens)", "train/tokens"),
        Rule(r"batch_size_in_tokens", "train/batch_tokens"),
        Rule(r"throughput/device/(tokens_per_second|TPS)", "perf/device_tokens_per_s"),
        Rule(r"throughput/device/(batches_per_second|BPS)", "perf/device_steps_per_s"),
        # Held-out language-modelling sets: OLMo `eval/<set>/CrossEntropyLoss`,
        # OLMo-core `eval/lm/<set>/CE loss`. Perplexity is exp(loss): dropped.
        Rule(r"eval/lm/(?P<set>[^/]+)/CE loss", _HELDOUT),
        Rule(r"eval/lm/(?P<set>[^/]+)/BPB", "eval/heldout/{set}/bpb"),
        Rule(r"eval/lm/[^/]+/PPL", None),
        Rule(r"eval/(?P<set>[^/]+)/CrossEntropyLoss", _HELDOUT),
        Rule(r"eval/[^/]+/Perplexity", None),
        # Downstream: OLMo `eval/downstream/<task>_<metric>`, OLMo-core
        # `eval/downstream/<task> (<metric>)`, and the bpb/soft families.
        Rule(r"eval/downstream_bpb/(?P<task>.+?)(?:_bpb)+", "eval/downstream/{task}/bpb"),
        Rule(r"eval/downstream_soft_log/(?P<task>.+?)_soft_log", "eval/downstream/{task}/soft_log"),
        Rule(r"eval/downstream_soft/(?P<task>.+?)_soft", "eval/downstream/{task}/soft"),
        Rule(rf"eval/downstream/(?P<task>[^/]+?)_(?P<metric>{_OLMO_DOWNSTREAM_METRICS})",
             "eval/downstream/{task}/{metric}"),
        Rule(r"eval/downstream/(?P<task>[^/(]+?) \((?P<metric>[^)]+)\)",
             "eval/downstream/{task}/{metric}"),
    ),
)

MAXTEXT = Profile(
    name="maxtext",
    description="MaxText (AI-Hypercomputer/maxtext) TensorBoard and metrics-file names",
    rules=(
        Rule(r"learning/loss", "train/loss"),
        Rule(r"learning/grad_norm", "train/grad_norm"),
        Rule(r"learning/raw_grad_norm", "train/raw_grad_norm"),
        Rule(r"learning/current_learning_rate", "optim/lr"),
        Rule(r"learning/total_weights", "train/real_tokens_per_step"),
        Rule(r"perf/step_time_seconds", "perf/step_time_s"),
        Rule(r"perf/per_device_tokens_per_sec", "perf/device_tokens_per_s"),
        Rule(r"perf/per_device_tflops_per_sec", "perf/per_device_tflops_per_s"),
        Rule(r"perf/per_device_tflops", "perf/per_device_tflops_per_step"),
        # MaxText evaluates one eval split; its average loss is the held-out loss.
        Rule(r"eval/avg_loss", "eval/heldout/default/loss"),
        Rule(r"eval/total_loss|eval/total_weights", None),  # numerator and denominator of avg
    ),
)

LLMC = Profile(
    name="llmc",
    description="llm.c, modded-nanogpt, nanoGPT and torchtune text logs (names as text_logs emits them)",
    rules=(
        # llm.c log file: `s:N trl:X lr:Y norm:Z`, `s:N tel:X`, `s:N eval:X` (HellaSwag accuracy)
        Rule(r"trl", "train/loss"),
        Rule(r"tel", "eval/heldout/val/loss"),
        Rule(r"lr", "optim/lr"),
        Rule(r"norm", "train/grad_norm"),
        Rule(r"eval", "eval/downstream/hellaswag/acc"),
        # modded-nanogpt: `step:N/M train_loss:X train_time:Tms step_avg:Ams`, `val_loss:X`
        Rule(r"train_loss", "train/loss"),
        Rule(r"val_loss", "eval/heldout/val/loss"),
        Rule(r"train_time_ms", "perf/train_time_s", 1e-3),
        Rule(r"step_time_ms", "perf/step_time_s", 1e-3),
        # nanoGPT stdout: `iter N: loss X, time Tms, mfu M%`, `step N: train loss X, val loss Y`
        Rule(r"loss", "train/loss"),
        Rule(r"time_ms", "perf/step_time_s", 1e-3),
        Rule(r"mfu_percent", "perf/mfu", 1e-2),
        Rule(r"eval_train_loss", "eval/heldout/train/loss"),
        Rule(r"eval_val_loss", "eval/heldout/val/loss"),
    ),
)

NANOGPT = Profile(
    name="nanogpt",
    description="nanoGPT's W&B keys (iter, train/loss and val/loss estimated at eval, lr, mfu %)",
    step_key="iter",
    rules=(
        # nanoGPT logs both at eval time, estimated over eval_iters batches of each split: its
        # only record of the training loss, and the held-out loss beside it.
        Rule(r"train/loss", "train/loss"),
        Rule(r"val/loss", "eval/heldout/val/loss"),
        Rule(r"lr", "optim/lr"),
        Rule(r"mfu", "perf/mfu", 1e-2),
        Rule(r"iter", None),
    ),
)

HF = Profile(
    name="hf",
    description="Hugging Face Trainer's W&B keys (also LLaMA-Factory, TRL): train/*, eval/*",
    step_key="train/global_step",
    rules=(
        Rule(r"train/loss", "train/loss"),
        Rule(r"train/grad_norm", "train/grad_norm"),
        Rule(r"train/learning_rate", "optim/lr"),
        Rule(r"train/num_input_tokens_seen", "train/tokens"),
        # The last row's aggregates over the whole run (train_loss is the mean of every step's).
        Rule(r"train/(train_loss|train_runtime|train_samples_per_second|"
             r"train_steps_per_second|total_flos)", None),
        Rule(r"eval/loss", "eval/heldout/eval/loss"),
        Rule(r"eval/(?P<set>.+)_loss", _HELDOUT),
        Rule(r"eval/(runtime|samples_per_second|steps_per_second)", None),
        Rule(r"eval/(?P<set>.+)_(runtime|samples_per_second|steps_per_second)", None),
    ),
)

LIGHTNING = Profile(
    name="lightning",
    description="PyTorch Lightning's loggers (TensorBoardLogger, CSVLogger): the epoch and "
                "LearningRateMonitor series it writes, and its documentation's train_loss/val_loss",
    rules=(
        # `self.log("train_loss", loss, on_step=True, on_epoch=True)` writes train_loss_step and
        # train_loss_epoch; the per-step one is the training loss (meaning.lightning_twin).
        Rule(r"train_loss(?:_step)?", "train/loss"),
        Rule(r"val_loss(?:_epoch)?", "eval/heldout/val/loss"),
        # Lightning logs the epoch beside every logged step.
        Rule(r"epoch", "train/epoch"),
        # LearningRateMonitor: lr-<Optimizer>, and lr-<Optimizer>/pg<N> for several param groups.
        Rule(r"lr-[A-Za-z]\w*", "optim/lr"),
        Rule(r"lr-[A-Za-z]\w*/pg(?P<g>\d+)", "optim/lr_group{g}"),
    ),
)

TORCHTITAN = Profile(
    name="torchtitan",
    description="torchtitan's metrics (its TensorBoard and W&B loggers): loss_metrics/*, throughput(tps), mfu(%)",
    rules=(
        # Its `lr` and `grad_norm` are everyone's names, which meaning.py reads without a rule here
        # (a rule would count towards choosing this profile for any custom loop).
        Rule(r"loss_metrics/global_avg_loss", "train/loss"),  # the mean over data-parallel ranks
        # Tokens per second per device, the model-parallel ranks of a replica counted as one.
        Rule(r"throughput\(tps\)", "perf/device_tokens_per_s"),
        Rule(r"mfu\(%\)", "perf/mfu", 1e-2),
        Rule(r"time_metrics/end_to_end\(s\)", "perf/step_time_s"),  # per step, over the log interval
        Rule(r"validation_metrics/loss", "eval/heldout/validation/loss"),
        # Shares beside their absolute twins (data_loading(s) and data_loading(%)): a name made
        # of the rest would read as the absolute one.
        Rule(r"(?P<space>memory|time_metrics)/(?P<name>[a-z_]+)\(%\)", "{space}/{name}_pct"),
    ),
)

MEGATRON = Profile(
    name="megatron",
    description="Megatron-LM's (and Megatron-DeepSpeed's, GPT-NeoX's, nanotron's) TensorBoard, W&B and stdout log names (lm loss, learning-rate, iteration-time)",
    rules=(
        # GPT-NeoX, Megatron's descendant, writes lm_loss; Megatron-DeepSpeed (BLOOM) puts each
        # TensorBoard tag under a section of its name: lm-loss-training/lm loss.
        Rule(r"(lm-loss-training/)?lm[ _]loss", "train/loss"),
        # The same series again with consumed samples or tokens as their step: another axis.
        Rule(r".+ vs (samples|tokens)|steps-vs-(samples|tokens)/.+", None),
        Rule(r"(lm-loss-validation/)?lm[ _]loss validation", "eval/heldout/validation/loss"),
        Rule(r"(lm-loss-validation/)?lm[ _]loss validation ppl( \S+)?", None),  # exp(loss)
        Rule(r"lm[ _]loss validation (?P<set>\S+)", _HELDOUT),  # another set: its stdout log's name
        Rule(r"(learning-rate/)?learning-rate|learning rate", "optim/lr"),
        Rule(r"(grad-norm/)?grad-norm|grad norm", "train/grad_norm"),
        Rule(r"(iteration-time/)?iteration-time", "perf/step_time_s"),  # seconds per iteration over the log interval
        Rule(r"elapsed time per iteration \(ms\)", "perf/step_time_s", 1e-3),  # its stdout log's name
        Rule(r"throughput per GPU \(TFLOP/s/GPU\)", "perf/device_tflops_per_s"),
        # GPT-NeoX's TensorBoard and W&B names (its tb_wandb_log): a section, then the stdout
        # log's name with `_` for spaces; its evaluations are the sets its stdout log names.
        Rule(r"train/lm_loss", "train/loss"),
        Rule(r"train/learning_rate", "optim/lr"),
        Rule(r"(validation|test)/lm_loss_ppl", None),  # exp(loss)
        Rule(r"(?P<set>validation|test)/lm_loss", _HELDOUT),
        Rule(r"runtime/iteration_time", "perf/step_time_s"),  # seconds per iteration over the log interval
        Rule(r"runtime/flops_per_sec_per_gpu", "perf/device_tflops_per_s", 1e-12),
        # nanotron's names (its LogItems, in its stdout log, TensorBoard and W&B alike); the rest
        # (lm_loss, lr, tokens_per_sec, ...) read as any trainer's.
        Rule(r"consumed_tokens", "train/tokens"),  # the samples through this step times their length
        Rule(r"model_tflops_per_gpu", "perf/device_tflops_per_s"),
    ),
)

COMPOSER = Profile(
    name="composer",
    description="MosaicML Composer and llm-foundry names (loss/train/total, metrics/eval/LanguageCrossEntropy)",
    rules=(
        Rule(r"loss/train/total", "train/loss"),
        Rule(r"time/token", "train/tokens"),  # tokens trained on so far
        Rule(r"time/batch", None),  # the step itself
        Rule(r"metrics/eval/LanguageCrossEntropy", "eval/heldout/eval/loss"),
        Rule(r"metrics/eval/(?P<set>[^/]+)/LanguageCrossEntropy", _HELDOUT),  # one of several eval sets
        Rule(r"metrics/(train|eval)/(.+/)?LanguagePerplexity", None),  # exp(cross-entropy)
        Rule(r"throughput/device/tokens_per_sec", "perf/device_tokens_per_s"),
        # LRMonitor: lr-<optimizer>/group<N>
        Rule(r"lr-[A-Za-z]\w*/group0", "optim/lr"),
        Rule(r"lr-[A-Za-z]\w*/group(?P<g>\d+)", "optim/lr_group{g}"),
    ),
)

NEMO = Profile(
    name="nemo",
    description="NVIDIA NeMo's names (reduced_train_loss, train_step_timing in s), in its TensorBoard, W&B and stdout",
    rules=(
        Rule(r"reduced_train_loss", "train/loss"),  # the loss all-reduced over data-parallel ranks
        Rule(r"train_step_timing in s", "perf/step_time_s"),
        Rule(r"global_step", None),  # the step itself, logged beside the step axis it already is
        Rule(r"tflops_per_sec_per_gpu", "perf/device_tflops_per_s"),
    ),
)

# fairseq's criterions log losses in bits (the summed loss / tokens / ln 2): times ln 2, nats.
_BITS = math.log(2)

FAIRSEQ = Profile(
    name="fairseq",
    description="fairseq's and metaseq's (OPT) names: TensorBoard folders or W&B sections train_inner/ (each log "
                "interval), train/ (each epoch), valid/; losses in bits, made nats",
    marker=r"train_inner/\w+",
    rules=(
        Rule(r"train_inner/loss", "train/loss", _BITS),
        Rule(r"train_inner/nll_loss", "train/nll_loss", _BITS),  # beside a label-smoothed loss
        # The means over each epoch, logged at its end: the training loss is train_inner's.
        Rule(r"train/(?P<stat>loss|nll_loss)", "train/epoch_{stat}", _BITS),
        Rule(r"(train_inner|train|valid\w*|test\w*)/ppl", None),  # 2 ** loss
        Rule(r"(valid|test)\w*/best_\w+", None),  # the best so far of a held-out stat
        Rule(r"(?P<set>(valid|test)\w*)/loss", _HELDOUT, _BITS),
        Rule(r"(?P<set>(valid|test)\w*)/nll_loss", "eval/heldout/{set}/nll_loss", _BITS),
        Rule(r"train_inner/lr", "optim/lr"),
        Rule(r"train_inner/gnorm", "train/grad_norm"),
        Rule(r"train_inner/wps", "perf/tokens_per_s"),  # tokens ("words") a second, every worker's
        Rule(r"train_inner/wpb", "train/batch_tokens"),
        Rule(r"train_inner/loss_scale", "train/loss_scale"),  # fp16's dynamic loss scale, not a loss
    ),
)

DEEPSPEED = Profile(
    name="deepspeed",
    description="DeepSpeed's monitor (TensorBoard, W&B, CSV): Train/Samples/*, numbered by samples seen (sample_steps.py)",
    rules=(
        Rule(r"Train/Samples/train_loss", "train/loss"),
        Rule(r"Train/Samples/lr", "optim/lr"),
        Rule(r"Train/Samples/loss_scale", "train/loss_scale"),  # fp16's dynamic loss scale, not a loss
    ),
)

# Lightning's ThroughputMonitor counts "items" in the lengths it is given: LitGPT gives it tokens.
LITGPT = Profile(
    name="litgpt",
    description="LitGPT's pretrain and finetune scripts (Lightning Fabric's TensorBoard, CSV and W&B loggers): loss, "
                "val_loss, iter_time; the optimizer step logged as `step`",
    # Its loggers number rows by micro-batch iteration (iter - 1): with gradient accumulation, not
    # the optimizer step, which it logs as `step`. Two runs of one recipe on different device
    # counts accumulate differently, so only `step` lines them up.
    step_key="step",
    marker=r"iter_time",
    rules=(
        Rule(r"loss", "train/loss"),  # the mean over the optimizer step's micro-batches
        Rule(r"val_loss", "eval/heldout/val/loss"),
        Rule(r"val_ppl", None),  # exp(val_loss)
        Rule(r"learning_rate", "optim/lr"),
        Rule(r"total_tokens", "train/tokens"),  # every device's, so far
        Rule(r"tokens", "train/device_tokens"),  # one device's
        # The last micro-batch's time (with the optimizer step), not the whole step's.
        Rule(r"iter_time", "perf/iter_time_s"),
        Rule(r"iter", "train/micro_batches"),
        Rule(r"trainer/global_step", None),  # Lightning's WandbLogger's copy of its step: iter - 1
        Rule(r"epoch", "train/epoch"),
        Rule(r"device/items_per_sec", "perf/device_tokens_per_s"),
        Rule(r"items_per_sec", "perf/tokens_per_s"),
        Rule(r"device/mfu", "perf/mfu"),
        Rule(r"device/flops_per_sec", "perf/device_tflops_per_s", 1e-12),
    ),
)

LLAMAFACTORY = Profile(
    name="llamafactory",
    description="LLaMA-Factory's trainer_log.jsonl (its LogCallback): current_steps, loss, eval_loss, lr, "
                "percentage",
    step_key="current_steps",  # the Trainer's global step; the log has no field STEP_FIELDS names
    marker=r"percentage",  # beside its step field, which detection does not see as a name
    rules=(
        Rule(r"loss", "train/loss"),
        Rule(r"eval_loss", "eval/heldout/eval/loss"),
        Rule(r"lr|learning_rate", "optim/lr"),  # `lr` since 2024, `learning_rate` before
        Rule(r"epoch", "train/epoch"),
        Rule(r"total_tokens", "train/tokens"),  # the Trainer's num_input_tokens_seen
        # Tokens seen over the time since the start: a mean, which a stall barely moves.
        Rule(r"throughput", "perf/mean_tokens_per_s"),
        # The schedule's length, the share done and the clock as text: no series.
        Rule(r"total_steps|percentage|elapsed_time|remaining_time", None),
    ),
)

# ms-swift (ModelScope) runs the Hugging Face Trainer and appends each of its logs to
# logging.jsonl, with the step as progress text.
SWIFT = Profile(
    name="swift",
    description="ms-swift's logging.jsonl (its callback's copy of each Trainer log): loss, eval_loss, "
                "token_acc, memory(GiB), the step as global_step/max_steps (\"340/9060\")",
    step_key="global_step/max_steps",
    # The step field on every line (for the step), a series of its own (for detection, which
    # sees the series, not the step field).
    marker=r"global_step/max_steps|train_speed\(iter/s\)",
    rules=(
        Rule(r"loss", "train/loss"),
        Rule(r"token_acc", "train/token_acc"),
        Rule(r"grad_norm", "train/grad_norm"),
        Rule(r"learning_rate", "optim/lr"),
        Rule(r"epoch", "train/epoch"),
        Rule(r"eval_loss", "eval/heldout/eval/loss"),
        Rule(r"eval_token_acc", "eval/heldout/eval/token_acc"),
        Rule(r"memory\(GiB\)", "system/max_memory_gib"),  # the most CUDA memory held so far
        # Steps over the time since the start: a mean, which a stall barely moves.
        Rule(r"train_speed\(iter/s\)", "perf/mean_steps_per_s"),
        # The run's and each evaluation's totals, and the share done and the clock as text.
        Rule(r"(eval|train)_(runtime|samples_per_second|steps_per_second)|train_loss|total_flos", None),
        Rule(r"percentage|elapsed_time|remaining_time", None),
    ),
)

# lingua's train.py logs its MetricLogger's names to metrics.jsonl and to W&B; monitor.importers.
# lingua_dump reads its evaluation files' names under validation/ and evals/.
LINGUA = Profile(
    name="lingua",
    description="Meta's lingua (its dump folder's metrics.jsonl, metrics.validation.jsonl and metrics.eval.jsonl, "
                "and its W&B runs): loss/out, optim/*, speed/*, memory/*",
    step_key="global_step",
    marker=r"loss/out",
    rules=(
        # The last micro-batch's loss of the optimizer step, averaged over the ranks.
        Rule(r"loss/out", "train/loss"),
        Rule(r"acc_step", None),  # the micro-batch within the step at logging: 0 unless asked
        Rule(r"optim/grad_norm", "train/grad_norm"),
        Rule(r"optim/total_tokens", "train/tokens"),
        # One rank's tokens since the last log over the time since it (a tensor-parallel group
        # counted once), and that times the model's FLOPs per token.
        Rule(r"speed/wps", "perf/device_tokens_per_s"),
        Rule(r"speed/FLOPS", "perf/device_tflops_per_s", 1e-12),
        Rule(r"speed/curr_iter_time", "perf/iter_time_s"),  # the last micro-batch's, not the step's
        Rule(r"speed/data_load_time", "perf/data_load_s"),
        Rule(r"memory/power_draw", "system/gpu_power_w", 1e-3),  # torch.cuda.power_draw(): milliwatts
        # Per held-out source: the mean loss of a token; per character; a sequence's summed loss.
        Rule(r"validation/(?P<set>[^/]+)/nll_per_token", "eval/heldout/{set}/loss"),
        Rule(r"validation/(?P<set>[^/]+)/(?P<stat>[^/]+)", "validation/{set}/{stat}"),
        # lm-eval's results: `<metric>,<filter>`, `none` when the task filters nothing.
        Rule(r"evals/(?P<task>[^/]+)/(?P<metric>[^/,]+)_stderr,none", "eval/downstream/{task}/{metric}/stderr"),
        Rule(r"evals/(?P<task>[^/]+)/(?P<metric>[^/,]+),none", "eval/downstream/{task}/{metric}"),
        Rule(r"evals/(?P<task>[^/]+)/(?P<metric>[^/,]+)_stderr,(?P<filter>[^/]+)",
             "eval/downstream/{task}/{metric}_{filter}/stderr"),
        Rule(r"evals/(?P<task>[^/]+)/(?P<metric>[^/,]+),(?P<filter>[^/]+)", "eval/downstream/{task}/{metric}_{filter}"),
    ),
)

# fairseq2's metric descriptors' display names: its JSON Lines recorder's (monitor.importers.
# fairseq2_metrics reads a validation section's names under valid/) and its W&B recorder's
# (`<section>/<display name>`).
FAIRSEQ2 = Profile(
    name="fairseq2",
    description="Meta's fairseq2 (its metrics/ folder's train.jsonl and valid*.jsonl, and its W&B runs): "
                "NLL Loss, Gradient Norm, Learning Rate, Elements per Second, valid/NLL Loss",
    step_key="Step",
    marker=r"(train/|valid/(.+/)?)?NLL Loss",
    rules=(
        # The mean loss of a target token (nats) over the steps since the last published values.
        Rule(r"(train/)?NLL Loss", "train/loss"),
        Rule(r"(train/)?Gradient Norm", "train/grad_norm"),
        Rule(r"(train/)?Learning Rate", "optim/lr"),
        Rule(r"(train/)?Loss Scale", "train/loss_scale"),  # fp16's dynamic loss scale, not a loss
        Rule(r"(train/)?Data Epoch", "train/epoch"),
        # Summed over the data-parallel workers: every worker's tokens, padding included.
        Rule(r"(train/)?Elements per Second", "perf/tokens_per_s"),
        Rule(r"(train/)?Total Number of Elements", "train/tokens"),
        Rule(r"valid/NLL Loss", "eval/heldout/valid/loss"),
        Rule(r"valid/(?P<set>[^/]+)/NLL Loss", _HELDOUT),
    ),
)

# The names Flax's examples (lm1b, wmt, gemma) give CLU's metric writers, the same in their
# TensorBoard folder and their console log (monitor.importers.clu_log).
FLAX = Profile(
    name="flax",
    description="Flax's examples through CLU's metric writers (TensorBoard and console log): train_loss, "
                "train_learning_rate, eval_loss, steps_per_sec",
    marker=r"train_(learning_rate|perplexity)|eval_perplexity",
    rules=(
        # Per-token means over the steps since the last write (the summed metric over its weights).
        Rule(r"train_loss", "train/loss"),
        Rule(r"train_learning_rate", "optim/lr"),
        Rule(r"train_accuracy", "train/accuracy"),
        Rule(r"(train|eval)_perplexity", None),  # exp of the loss, clipped at 1e4
        # The examples evaluate one split; its loss is the held-out loss.
        Rule(r"eval_loss", "eval/heldout/eval/loss"),
        Rule(r"eval_accuracy", "validation/eval/accuracy"),
        # CLU's ReportProgress: steps a second since its last report, seconds since the job began.
        Rule(r"steps_per_sec", "perf/steps_per_s"),
        Rule(r"uptime", "perf/uptime_s"),
    ),
)

# Levanter's trainer callbacks (log_step_info, log_performance_stats), its tagged evaluator and its
# lm-eval harness callback, in its W&B, TensorBoard and JSON logger trackers alike (Marin runs it).
LEVANTER = Profile(
    name="levanter",
    description="Stanford CRFM's Levanter (and Marin): train/loss, optim/learning_rate, throughput/*, "
                "eval/<tag>/loss, lm_eval/<task>/<metric>",
    marker=r"throughput/(duration|total_tokens|tokens_per_second)|run_progress",
    rules=(
        Rule(r"global_step|run_progress", None),  # the step itself, and it over the planned steps
        Rule(r"optim/learning_rate", "optim/lr"),
        # Tokens through this step (its examples so far times their length), every worker's.
        Rule(r"throughput/total_tokens", "train/tokens"),
        Rule(r"throughput/tokens_per_second", "perf/tokens_per_s"),
        Rule(r"throughput/duration", "perf/step_time_s"),
        Rule(r"throughput/mfu", "perf/mfu", 0.01),  # in percent
        Rule(r"throughput/loading_time", "perf/data_load_s"),
        Rule(r"throughput/hook_time", "perf/hook_time_s"),
        # The evaluator's totals over every tagged set, then each set: a leaf tag's mean loss of a
        # token is a held-out loss; a parent tag's micro and macro means, and the bits per byte,
        # are summaries of those.
        Rule(r"eval/(?P<stat>loss|macro_loss|bpb|macro_bpb)", "validation/all/{stat}"),
        Rule(r"eval/loading_time", "perf/eval_data_load_s"),
        Rule(r"eval/total_time", "perf/eval_time_s"),
        Rule(r"eval/(?P<set>.+)/loss", _HELDOUT),
        Rule(r"eval/(?P<set>.+)/(?P<stat>micro_loss|macro_loss|bpb|macro_bpb)", "validation/{set}/{stat}"),
        # lm-eval's results, `,none` taken off by Levanter; the averages over tasks are derived.
        Rule(r"lm_eval/averages/.+", None),
        Rule(r"lm_eval/(?P<task>[^/]+)/(?P<metric>[^/,]+)_stderr", "eval/downstream/{task}/{metric}/stderr"),
        Rule(r"lm_eval/(?P<task>[^/]+)/(?P<metric>[^/,]+)", "eval/downstream/{task}/{metric}"),
        Rule(r"lm_eval/(?P<task>[^/]+)/(?P<metric>[^/,]+)_stderr,(?P<filter>[^/]+)",
             "eval/downstream/{task}/{metric}_{filter}/stderr"),
        Rule(r"lm_eval/(?P<task>[^/]+)/(?P<metric>[^/,]+),(?P<filter>[^/]+)", "eval/downstream/{task}/{metric}_{filter}"),
    ),
)


def _t5x(name: str, description: str, token_mean: str, other_rules: tuple[Rule, ...]) -> Profile:
    """A T5X profile: `token_mean` is the name of its mean loss of a token (t5x_gin.py says which
    name that is for a run), `other_rules` what the other loss names are."""
    return Profile(
        name=name,
        description=description,
        marker=t5x_gin.MARKER,
        rules=(
            Rule(rf"train/{token_mean}", "train/loss"),
            Rule(rf"training_eval/(?P<set>[^/]+)/{token_mean}", _HELDOUT),
            *other_rules,
            Rule(r"train/learning_rate", "optim/lr"),
            # Rates over the time since the last write: steps, and target tokens of every device or one.
            Rule(r"train/timing/steps_per_second", "perf/steps_per_s"),
            Rule(r"train/timing/target_tokens_per_second", "perf/tokens_per_s"),
            Rule(r"train/timing/target_tokens_per_second_per_core", "perf/device_tokens_per_s"),
            # The rest of what an evaluation of a held-out task logs: its accuracy, its other losses,
            # its timing.
            Rule(r"training_eval/(?P<set>[^/]+)/(?P<stat>.+)", "validation/{set}/{stat}"),
            # seqio's inference evaluation: a folder per task, its metrics tagged eval/<metric>.
            Rule(r"inference_eval/(?P<task>[^/]+)/eval/(?P<metric>[^/]+)", "eval/downstream/{task}/{metric}"),
        ),
    )


# T5X's metrics, written by CLU's metric writers into its model folder's train/ and
# training_eval/<task>/, and seqio's into inference_eval/<task>/ (see t5x_gin.py for the two cases).
T5X = _t5x(
    t5x_gin.SUMMED,
    "T5X (google-research/t5x) with its default loss_normalizing_factor, none: loss is a batch's summed "
    "loss, loss_per_nonpadding_target_token a token's mean",
    "loss_per_nonpadding_target_token",
    (Rule(r"train/(?P<loss>loss|cross_ent_loss|z_loss)", "train/summed_{loss}"),
     # A loss over every target token, padding included: a token's mean where batches are packed.
     Rule(r"train/(?P<loss>[a-z_]+)_per_all_target_tokens", "train/{loss}_per_all_target_tokens")),
)
T5X_NORMALIZED = _t5x(
    t5x_gin.NORMALIZED,
    "T5X (google-research/t5x) with a loss_normalizing_factor set: loss is a token's mean",
    "loss",
    (Rule(r"train/(?P<loss>cross_ent_loss|z_loss)", "train/{loss}"),
     # A loss over a count of tokens is then a token's mean divided by the tokens again.
     Rule(r"train/[a-z_]+_per_(nonpadding|all)_target_tokens?", None)),
)

# Pax (google/paxml, with praxis' layers): TensorBoard folders summaries/train/, eval_train/ (the
# training data evaluated), eval_test_<input>/ and decode_test_<input>/. Each writes the loss as
# `loss`, its weighted metrics as `Metrics/<name>` beside their weights (`Metrics/<name>-weight`),
# and the layers' summaries under their names with the summary type appended (`learning/lr_scalar`;
# `_aggregate_scalar` in older praxis).
PAX = Profile(
    name="pax",
    description="Pax (google/paxml) TensorBoard folders: Metrics/avg_xent, loss, Steps/sec, learning/lr_scalar, "
                "eval_test_<input>/",
    marker=r"(.+/)?Metrics/(avg_xent|fraction_of_correct_next_step_preds)",
    rules=(
        # A language model's mean cross-entropy of a token (nats); log_pplx is the same value again.
        Rule(r"train/Metrics/avg_xent", "train/loss"),
        Rule(r"eval_test_(?P<set>[^/]+)/Metrics/avg_xent", _HELDOUT),
        Rule(r"(.+/)?Metrics/log_pplx", None),
        Rule(r"(.+/)?Metrics/[^/]+-weight", None),  # what each weighted mean was weighted by
        # The objective (cross-entropy and any auxiliary loss); Metrics/total_loss is its weighted mean.
        Rule(r"train/loss", "train/total_loss"),
        Rule(r"train/Metrics/total_loss", None),
        Rule(r"train/Metrics/(?P<name>[^/]+)", "train/{name}"),
        Rule(r"train/Steps/sec", "perf/steps_per_s"),
        # The learner logs its learning rate twice, as `lr` and `learning/lr`.
        Rule(r"train/learning/lr(_aggregate)?_scalar", "optim/lr"),
        Rule(r"train/lr(_aggregate)?_scalar", None),
        Rule(r"eval_test_(?P<set>[^/]+)/(Metrics/)?(?P<stat>.+)", "validation/{set}/{stat}"),
        Rule(r"eval_train/(Metrics/)?(?P<stat>.+)", "validation/train/{stat}"),
    ),
)

BUILTIN_PROFILES: dict[str, Profile] = {
    p.name: p for p in (GAPWATCH, OLMO, MAXTEXT, LLMC, NANOGPT, HF, LIGHTNING, TORCHTITAN, MEGATRON, COMPOSER, NEMO,
                        FAIRSEQ, DEEPSPEED, LITGPT, LLAMAFACTORY, SWIFT, LINGUA, FAIRSEQ2, FLAX, LEVANTER,
                        T5X, T5X_NORMALIZED, PAX)
}


# --- user profiles --------------------------------------------------------------------------------
def user_profiles_path(path: str | os.PathLike | None = None) -> Path:
    """The user's profile file: the argument, else $GAPWATCH_PROFILES, else the config dir."""
    if path is not None:
        return Path(path)
    if os.environ.get(PROFILES_ENV):
        return Path(os.environ[PROFILES_ENV])
    import platformdirs

    return Path(platformdirs.user_config_dir("gapwatch")) / PROFILES_FILE_NAME


def load_user_profiles(path: str | os.PathLike | None = None) -> dict[str, Profile]:
    """Profiles defined in the user's YAML file; {} when the file does not exist."""
    import yaml

    file = user_profiles_path(path)
    explicit = path is not None or bool(os.environ.get(PROFILES_ENV))
    if not file.exists():
        if explicit:
            raise GapwatchError(f"{file}: profile file does not exist")
        return {}
    try:
        doc = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise GapwatchError(f"{file}: cannot read profiles: {_one_line(exc)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles", {}), dict):
        raise GapwatchError(f"{file}: expected a mapping with a 'profiles' mapping at the top")
    raw = doc.get("profiles") or {}
    out: dict[str, Profile] = {}
    for name, spec in raw.items():
        out[str(name)] = _profile_from_spec(str(name), spec, file, raw)
    return out


def _profile_from_spec(name: str, spec, file: Path, raw: dict, seen=()) -> Profile:
    where = f"{file}: profile {name!r}"
    if not isinstance(spec, dict):
        raise GapwatchError(f"{where}: expected a mapping with 'rules'")
    unknown = set(spec) - {"extends", "step_key", "rules", "description"}
    if unknown:
        raise GapwatchError(f"{where}: unknown field(s) {sorted(unknown)}")
    rules = []
    for i, r in enumerate(spec.get("rules") or []):
        if not isinstance(r, dict) or "match" not in r or not ({"key", "drop"} & set(r)):
            raise GapwatchError(f"{where}: rule {i + 1} needs 'match' and 'key' or 'drop: true'")
        try:
            rule = Rule(str(r["match"]), None if r.get("drop") else str(r["key"]),
                        float(r.get("scale", 1.0)))
        except re.error as exc:
            raise GapwatchError(f"{where}: rule {i + 1}: bad pattern: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise GapwatchError(f"{where}: rule {i + 1}: {_one_line(exc)}") from None
        rules.append(rule)
    step_key = spec.get("step_key")
    parent_name = spec.get("extends")
    if parent_name is not None:
        parent_name = str(parent_name)
        if parent_name == name and name in BUILTIN_PROFILES:
            # Overriding a built-in profile's mappings: its rules after the user's.
            parent = BUILTIN_PROFILES[name]
        elif parent_name in seen or parent_name == name:
            raise GapwatchError(f"{where}: 'extends' loops back to {parent_name!r}")
        elif parent_name in raw:
            parent = _profile_from_spec(parent_name, raw[parent_name], file, raw,
                                        (*seen, name))
        elif parent_name in BUILTIN_PROFILES:
            parent = BUILTIN_PROFILES[parent_name]
        else:
            raise GapwatchError(f"{where}: extends unknown profile {parent_name!r}")
        rules.extend(parent.rules)
        step_key = step_key or parent.step_key
    return Profile(name=name, description=str(spec.get("description", f"user profile ({file})")),
                   rules=tuple(rules), step_key=step_key)


def all_profiles(user_file: str | os.PathLike | None = None) -> dict[str, Profile]:
    """Built-in profiles, with the user's file adding to them (same name: the user's wins)."""
    return {**BUILTIN_PROFILES, **load_user_profiles(user_file)}


def get_profile(name: str, user_file: str | os.PathLike | None = None) -> Profile:
    profiles = all_profiles(user_file)
    if name not in profiles:
        raise GapwatchError(
            f"unknown profile {name!r}; known: {', '.join(sorted(profiles))}"
        )
    return profiles[name]


def detect_profile(names, user_file: str | os.PathLike | None = None,
                   prefer: str | None = None, against=None) -> Profile:
    """The profile whose rules explain the most names, less twice the mappings the data
    contradicts (against(profile): how many, `meaning.contradictions` of the source, when its
    data is known); `prefer` (the format's own) wins ties, then built-in order (gapwatch first)."""
    names = list(names)
    profiles = all_profiles(user_file)
    order = list(profiles)
    if prefer in profiles:
        order.remove(prefer)
        order.insert(0, prefer)

    def weight(n: str) -> tuple[int, int]:
        contradicted = against(profiles[n]) if against is not None else 0
        return profiles[n].score(names) - 2 * contradicted, -order.index(n)

    return profiles[max(order, key=weight)]


def resolve_profile(profile: str | Profile | None, names, prefer: str | None = None,
                    user_file: str | os.PathLike | None = None, against=None) -> Profile:
    """A Profile object from a name, an object, or None (auto-detect from the names and, when
    given, what the data contradicts: see detect_profile)."""
    if isinstance(profile, Profile):
        return profile
    if profile:
        return get_profile(profile, user_file)
    return detect_profile(names, user_file, prefer=prefer, against=against)


def marked_step_key(names) -> str | None:
    """The step key of a built-in profile whose marker the names carry, when the run logs it: a
    trainer whose loggers number its rows by something other than its optimizer step (LitGPT's
    `step` wins over the one a logger declares and over STEP_KEYS), or whose log names its step
    as no other does (LLaMA-Factory's `current_steps`)."""
    names = {str(n) for n in names}
    for profile in BUILTIN_PROFILES.values():
        if profile.marker and profile.step_key in names and any(
                re.fullmatch(profile.marker, n) for n in names):
            return profile.step_key
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


__all__ = [
    "Rule",
    "Profile",
    "BUILTIN_PROFILES",
    "all_profiles",
    "get_profile",
    "detect_profile",
    "resolve_profile",
    "marked_step_key",
    "load_user_profiles",
    "user_profiles_path",
    "default_key",
]
