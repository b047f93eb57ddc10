"""T5X's gin config, and which of its losses is the mean loss of a token.

T5X sums a batch's loss over its target tokens and divides the sum by the model's
`loss_normalizing_factor`. Its configs leave that factor at None, so its `loss` series is the
batch's sum (hundreds of thousands of nats on a real batch) and `loss_per_nonpadding_target_token`
is the mean loss of a token; a run that sets the factor (a constant such as 233472 when fine-tuning
the public checkpoints, or `NUM_REAL_TARGET_TOKENS`) logs a token's mean as `loss` and that mean
divided again by the token count as `loss_per_nonpadding_target_token`. The names alone cannot
tell the two apart; the run's gin config can. T5X writes it as `config.gin` in its model folder and
as the `config` text summary of its `train/` folder (the same text in Markdown: bindings indented,
comments as headings). The `t5x` and `t5x-normalized` profiles (profiles.py) read the two cases.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

GIN_FILE = "config.gin"
GIN_TAG = "config"  # the text summary t5x.gin_utils.summarize_gin_config writes
MARKER = r"(.+/)?loss_per_nonpadding_target_token"  # a name only T5X's metrics have
SUMMED, NORMALIZED = "t5x", "t5x-normalized"  # the profiles of the two cases

_FACTOR = "loss_normalizing_factor"
# One binding on one line: `NAME = value` (a macro) or `scope/configurable.param = value`.
_BINDING = re.compile(r"\s*(?P<name>[A-Za-z_][\w.]*(?:/[\w.]+)*)\s*=\s*(?P<value>\S.*)")


def gin_settings(text: str) -> dict[str, object]:
    """The one-line bindings of a gin config (plain or as gin's Markdown), as settings: a value
    that is a Python literal as that value, any other (`%MACRO`, `@configurable()`) as its text.
    A value written over several lines (a list, a dict) is left out."""
    out: dict[str, object] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _BINDING.fullmatch(line)
        if m is None:
            continue
        value = m["value"].rstrip()
        try:
            out[m["name"]] = ast.literal_eval(value)
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            if value.count("(") == value.count(")") and value[-1] not in "[{(,\\":
                out[m["name"]] = value
    return out


def profile_for(settings: dict[str, object]) -> str | None:
    """The profile that reads a T5X run with these gin settings: SUMMED where its loss normalizing
    factor is None (T5X's default, also where the config binds none), NORMALIZED where it is set;
    None where the settings hold no configurable's binding (no gin config) or name the factor
    through a macro they do not bind."""
    if not any("." in str(k) for k in settings):
        return None
    bound = [v for k, v in settings.items() if str(k).rsplit(".", 1)[-1] == _FACTOR]
    if not bound:
        return SUMMED
    value = bound[-1]
    if isinstance(value, str) and value.startswith("%"):
        if value[1:] not in settings:
            return None
        value = settings[value[1:]]
    return SUMMED if value is None else NORMALIZED


def is_t5x(names: Iterable[str]) -> bool:
    return any(re.fullmatch(MARKER, str(n)) for n in names)


def unknown_note(source: str) -> str:
    return (f"{source}: no T5X gin config (config.gin, the config text summary of train/, or the lines gin_utils.py "
            "logs) says whether the run set a loss_normalizing_factor: read as T5X's default, with none, where `loss` is a batch's "
            f"summed loss and loss_per_nonpadding_target_token a token's mean; --profile {NORMALIZED} reads a "
            "run that set one")
