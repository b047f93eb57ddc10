"""A framework's metric names as gapwatch keys, through the importers' profile rules.

Each integration declares a `Profile` of its framework's names (the first matching rule wins, a
rule without a key drops the name); a name no rule matches keeps its own name made a valid key
(`aux_loss` -> `extra/aux_loss`), so nothing logged disappears. Names are mapped once each.
"""

from __future__ import annotations

from typing import Any

from monitor import schema
from monitor.importers.profiles import Profile, Rule

_HELDOUT = "eval/heldout/{set}/loss"


def hand_named(eval_set: str) -> Profile:
    """The names people give the metrics they log themselves (Lightning's `self.log`, Accelerate's
    `accelerator.log`): `val_loss` and `val/loss` are the held-out set `eval_set`."""
    return Profile(
        name="hand-named",
        description="the names people log their own metrics under",
        rules=(
            Rule(r"(train[_/])?loss(_step)?", schema.TRAIN_LOSS),
            Rule(r"train[_/]loss_epoch", None),  # Lightning's mean of an epoch's step losses
            Rule(r"(val|valid|validation|eval)[_/]loss(_epoch)?", schema.heldout_key(eval_set)),
            Rule(r"(val|valid|validation|eval)_(?P<set>.+)_loss(_epoch)?", _HELDOUT),
            Rule(r"(val|valid|validation|eval)/(?P<set>[^/]+)/loss(_epoch)?", _HELDOUT),
            # Several val dataloaders: Lightning appends the loader's index to the name.
            Rule(r"(val|valid|validation)[_/]loss/dataloader_idx_(?P<set>\d+)", "eval/heldout/val_{set}/loss"),
            Rule(r"(lr|learning_rate|lr-[A-Za-z]+)", schema.OPTIM_LR),  # lr-<Optimizer>: LearningRateMonitor
            Rule(r"(train[_/])?grad_norm|grad_2\.0_norm_total", schema.TRAIN_GRAD_NORM),
            Rule(r"epoch", schema.DATA_EPOCH),
            Rule(r"(train[_/])?tokens", schema.TRAIN_TOKENS),
        ),
    )


class KeyMapper:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._keys: dict[str, str | None] = {}

    def key(self, name: str) -> str | None:
        """The gapwatch key of `name`, or None when it is dropped."""
        try:
            return self._keys[name]
        except KeyError:
            key, _, _ = self.profile.map_name(name)
            self._keys[name] = key
            return key

    def metrics(self, logged: dict[str, Any]) -> dict[str, Any]:
        """The logged values under their keys, without the dropped names. Two names onto one key
        keep the first (a framework that logs `loss` and `train/loss` logs the same value)."""
        out: dict[str, Any] = {}
        for name, value in logged.items():
            key = self.key(name)
            if key is not None and key not in out:
                out[key] = value
        return out
