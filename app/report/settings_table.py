"""The two runs' settings side by side: where their recipes differ.

Each run's configuration is what it recorded of its hyperparameters: `Monitor(config=...)`, a W&B
run's config, Megatron's arguments, Lightning's hparams.yaml. Nested settings are flattened to
dotted names (`optimizer.lr`). A setting the two runs give different values, or that only one of
them records, is a row; the ones they share are counted in the note. A run's learning rate or
batch size that differs from its reference's is often the first explanation of a gap, so this is
what a person reads before trusting a divergence.
"""

from __future__ import annotations

import json
import math
from typing import Any

from monitor.schema import RunData

from app.report.model import Column, Table
from app.report.pair import ComparedPair

# Past this many differing settings (two Hugging Face configs of different models differ in dozens
# of architecture fields) the rest are counted, not listed.
MAX_ROWS = 60
# Keys of a config that are not settings: the source's final values (imported runs keep them
# there) and W&B's own bookkeeping (`_wandb`).
NOT_SETTINGS = ("summary",)


def settings_table(pair: ComparedPair) -> Table:
    table = Table(
        id="settings",
        title="Settings that differ",
        columns=[Column("setting", "setting", fmt=""), Column("run", pair.run.name, fmt=""),
                 Column("reference", pair.reference.name, fmt="")],
        flag_key="differs",
    )
    run, ref = settings(pair.run), settings(pair.reference)
    if not run or not ref:
        recorded = [d.name for d, s in ((pair.run, run), (pair.reference, ref)) if s]
        table.empty_reason = (f"only {recorded[0]} recorded its settings: nothing to compare them with" if recorded
                              else "neither run recorded its settings (a W&B config, trainer arguments, "
                                   "Lightning's hparams.yaml)")
        return table
    names = sorted(run.keys() | ref.keys())
    same = [n for n in names if n in run and n in ref and _alike(run[n], ref[n])]
    # Settings both give, differently, first: they are the recipe's differences.
    rows = sorted(({"setting": n, "run": _shown(run, n), "reference": _shown(ref, n), "differs": n in run and n in ref}
                   for n in names if n not in same), key=lambda r: (not r["differs"], r["setting"]))
    table.rows = rows[:MAX_ROWS]
    left = len(rows) - len(table.rows)
    table.note = (f"{len(same):,} of {len(names):,} settings are the same in both runs"
                  + (f"; {left:,} more that differ are not listed" if left else "")
                  + ". Settings both runs give, differently, come first; \"-\" is a setting the run does not record.")
    if not rows:
        table.empty_reason = f"the two runs record the same {len(names):,} settings"
    return table


def settings(data: RunData) -> dict[str, Any]:
    """A run's settings as flat dotted names -> values."""
    config = {k: v for k, v in data.info.config.items() if k not in NOT_SETTINGS and not str(k).startswith("_")}
    return flatten(config)


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
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    return _text(a) == _text(b)


def _shown(config: dict[str, Any], name: str) -> str:
    return _text(config[name]) if name in config else "-"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)
