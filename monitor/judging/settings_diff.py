"""Where two runs' recipes differ: their recorded settings compared, for `detect`, the report, the
run page and the alerts.

Each run's configuration is what it recorded of its hyperparameters: `Monitor(config=...)`, a W&B
run's config, Megatron's arguments, Lightning's hparams.yaml or a TensorBoard run's hparams.
Nested settings are flattened to dotted names (`optimizer.lr`). A setting the two runs give
different values, or that only one of them records, differs; the ones they share are counted. A
setting two trainers name differently (`lr` and `learning_rate`, ALIASES) is compared as one,
shown under both names (`lr / learning_rate`).

Those both give differently come first, the optimisation recipe's (learning rate, batch size,
warmup, decay, seed...) before the rest: a learning rate or batch size that differs from the
reference's is often the first explanation of a gap, so a person reads this before trusting a
divergence.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

# Keys of a config that are not settings: the source's final values (imported runs keep them
# there) and W&B's own bookkeeping (`_wandb`).
NOT_SETTINGS = ("summary",)
UNRECORDED = "-"
# Words of a setting's name that make it part of the recipe a divergence is first checked against,
# in the order they are listed: the learning rate and the batch size before the rest.
RECIPE_WORDS = ("lr", "batch", "warmup", "decay", "schedule", "scheduler", "optimizer", "optim", "beta1", "beta2",
                "momentum", "clip", "accumulation", "seed")


# One setting under the names trainers give it (the last part of a dotted name): a reference from
# another trainer records its learning rate as `learning_rate` (Hugging Face, nanoGPT), `lr`
# (Lightning, Megatron) or `optim.lr` (OLMo-core, ours). Only names that mean one thing everywhere:
# not `batch_size` (a device's batch in some trainers, the global one in others) nor `warmup`.
ALIASES = {
    **dict.fromkeys(("lr", "learning_rate"), "learning rate"),
    **dict.fromkeys(("weight_decay", "wd"), "weight decay"),
    **dict.fromkeys(("warmup_steps", "warmup_iters", "lr_warmup_steps", "lr_warmup_iters", "num_warmup_steps"),
                    "warmup steps"),
    **dict.fromkeys(("max_steps", "max_iters", "train_iters", "total_steps", "num_training_steps"), "training steps"),
    **dict.fromkeys(("beta1", "adam_beta1"), "Adam beta1"),
    **dict.fromkeys(("beta2", "adam_beta2"), "Adam beta2"),
    **dict.fromkeys(("grad_clip", "max_grad_norm", "clip_grad", "clip_grad_norm", "gradient_clipping"),
                    "gradient clipping"),
    **dict.fromkeys(("gradient_accumulation_steps", "grad_accumulation_steps", "grad_accum_steps",
                     "accumulate_grad_batches"), "gradient accumulation"),
    **dict.fromkeys(("block_size", "seq_len", "seq_length", "sequence_length", "max_seq_len", "max_seq_length",
                     "context_length"), "sequence length"),
    **dict.fromkeys(("global_batch_size", "global_train_batch_size"), "global batch size"),
}


@dataclass(frozen=True)
class Difference:
    setting: str
    run: str  # the run's value as text, UNRECORDED when it does not record the setting
    reference: str
    both: bool  # both runs record it (with different values), rather than only one


@dataclass(frozen=True)
class SettingsDiff:
    differences: list[Difference]  # those both runs record first, the recipe's first among them
    same: int  # settings both record alike
    total: int  # settings either records
    recorded: tuple[bool, bool]  # whether the run and the reference record any setting

    @property
    def comparable(self) -> bool:
        return all(self.recorded)

    def why_not(self, run: str, reference: str) -> str:
        """Why nothing is compared ("" when something is)."""
        if self.comparable:
            return ""
        recorded = [name for name, has in zip((run, reference), self.recorded) if has]
        return (f"only {recorded[0]} recorded its settings: nothing to compare them with" if recorded else
                "neither run recorded its settings (a W&B config, trainer arguments, Lightning's hparams.yaml)")


def summary_line(diff: SettingsDiff, run: str, reference: str, most: int = 4) -> str:
    """The differences in one line, those both runs give first (`gapwatch detect` prints it)."""
    if not diff.comparable:
        return f"settings: {diff.why_not(run, reference)}"
    if not diff.differences:
        return f"settings: the same {diff.total:,} as {reference}"
    return f"settings that differ from {reference}: {payload_text(as_payload(diff, most), most)} (gapwatch report lists them)"


def as_payload(diff: SettingsDiff, most: int = 10) -> dict[str, Any] | None:
    """The differences as plain JSON for a notification (None when either run records nothing):
    the first `most` settings both runs give differently, and how many differ in all."""
    if not diff.comparable:
        return None
    both = [d for d in diff.differences if d.both]
    return {"given_differently": [{"setting": d.setting, "run": d.run, "reference": d.reference} for d in both[:most]],
            "given_differently_count": len(both), "recorded_by_one_only": len(diff.differences) - len(both),
            "same": diff.same}


def payload_text(payload: dict[str, Any], most: int = 4) -> str:
    """as_payload's differences in words: "learning_rate 0.003 vs 0.0006, ...; 2 more given
    differently; 3 recorded by one run only", or "the same N as the reference" (the alerts read
    it from a stored notification, summary_line from a diff)."""
    given = payload["given_differently"][:most]
    parts = [", ".join(f"{d['setting']} {d['run']} vs {d['reference']}" for d in given)] if given else []
    more = payload["given_differently_count"] - len(given)
    parts += [f"{more:,} more given differently"] if more > 0 else []
    one = payload["recorded_by_one_only"]
    parts += [f"{one:,} recorded by one run only"] if one else []
    return "; ".join(parts) if parts else f"the same {payload['same']:,} as the reference"


def compare_settings(run_config: dict, reference_config: dict) -> SettingsDiff:
    run, ref = settings(run_config), settings(reference_config)
    aliases = paired_aliases(run, ref)
    names = sorted((run.keys() | ref.keys()) - aliases.keys() - set(aliases.values()))
    same = [n for n in names if n in run and n in ref and _alike(run[n], ref[n])]
    differences = [Difference(n, _shown(run, n), _shown(ref, n), n in run and n in ref) for n in names if n not in same]
    for a, b in aliases.items():
        if _alike(run[a], ref[b]):
            same.append(a)
        else:
            differences.append(Difference(f"{a} / {b}", _text(run[a]), _text(ref[b]), True))
    differences.sort(key=lambda d: (not d.both, _recipe_rank(d.setting), d.setting))
    return SettingsDiff(differences, len(same), len(names) + len(aliases), (bool(run), bool(ref)))


def paired_aliases(run: dict[str, Any], ref: dict[str, Any]) -> dict[str, str]:
    """Settings the two runs record under different names for one thing (ALIASES): the run's name
    -> the reference's, where each run records that thing under exactly one name the other lacks."""
    def by_meaning(names) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for name in names:
            meaning = ALIASES.get(name.rsplit(".", 1)[-1].lower())
            if meaning:
                found.setdefault(meaning, []).append(name)
        return found

    ours, theirs = by_meaning(n for n in run if n not in ref), by_meaning(n for n in ref if n not in run)
    return {a[0]: theirs[m][0] for m, a in ours.items() if len(a) == 1 and len(theirs.get(m, ())) == 1}


def _recipe_rank(name: str) -> int:
    """Where a setting comes among those both runs give differently: the optimisation recipe's in
    RECIPE_WORDS order (the learning rate first), then the rest (a model config's architecture
    fields, paths, logging intervals)."""
    words = set(re.split(r"[^a-z0-9]+", name.lower().replace("learning_rate", "lr")))
    return next((i for i, word in enumerate(RECIPE_WORDS) if word in words), len(RECIPE_WORDS))


def settings(config: dict) -> dict[str, Any]:
    """A config's settings as flat dotted names -> values."""
    return flatten({k: v for k, v in config.items() if k not in NOT_SETTINGS and not str(k).startswith("_")})


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _alike(a: Any, b: Any) -> bool:
    """Equal as settings: 1 and 1.0 alike, NaN like NaN, lists and dicts by their JSON."""
    if _number(a) and _number(b):
        return a == b or (math.isnan(a) and math.isnan(b))
    return _text(a) == _text(b)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _shown(config: dict[str, Any], name: str) -> str:
    return _text(config[name]) if name in config else UNRECORDED


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)
