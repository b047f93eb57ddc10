"""Where two runs' recipes differ: their recorded settings compared, for the report and the run page.

Each run's configuration is what it recorded of its hyperparameters: `Monitor(config=...)`, a W&B
run's config, Megatron's arguments, Lightning's hparams.yaml or a TensorBoard run's hparams.
Nested settings are flattened to dotted names (`optimizer.lr`). A setting the two runs give
different values, or that only one of them records, differs; the ones they share are counted. A
learning rate or batch size that differs from the reference's is often the first explanation of a
gap, so a person reads this before trusting a divergence.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

# Keys of a config that are not settings: the source's final values (imported runs keep them
# there) and W&B's own bookkeeping (`_wandb`).
NOT_SETTINGS = ("summary",)
UNRECORDED = "-"


@dataclass(frozen=True)
class Difference:
    setting: str
    run: str  # the run's value as text, UNRECORDED when it does not record the setting
    reference: str
    both: bool  # both runs record it (with different values), rather than only one


@dataclass(frozen=True)
class SettingsDiff:
    differences: list[Difference]  # those both runs record first, then by name
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


def compare_settings(run_config: dict, reference_config: dict) -> SettingsDiff:
    run, ref = settings(run_config), settings(reference_config)
    names = sorted(run.keys() | ref.keys())
    same = [n for n in names if n in run and n in ref and _alike(run[n], ref[n])]
    differences = sorted((Difference(n, _shown(run, n), _shown(ref, n), n in run and n in ref)
                          for n in names if n not in same), key=lambda d: (not d.both, d.setting))
    return SettingsDiff(differences, len(same), len(names), (bool(run), bool(ref)))


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
