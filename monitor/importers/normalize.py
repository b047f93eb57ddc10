"""Turning an importer's raw result (source metric names) into gapwatch keys through a profile."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor import schema

from .imported_run import ImportedRun, scalars_frame
from .profiles import Profile

# Source columns that carry the tokens of one step, after mapping (OLMo's batch_size_in_tokens).
BATCH_TOKENS_KEY = "train/batch_tokens"


def apply_profile(run: ImportedRun, profile: Profile) -> ImportedRun:
    """Rename (and rescale) run.scalars' keys with the profile; dropped names disappear."""
    raw = run.scalars
    names = pd.unique(raw["key"])
    mapping = profile.mapping(names, source=run.source)
    kept = raw["key"].isin(list(mapping))
    frame = raw[kept]
    key_of = {src: key for src, (key, _) in mapping.items()}
    scale_of = {src: scale for src, (_, scale) in mapping.items()}
    keys = frame["key"]
    if isinstance(keys.dtype, pd.CategoricalDtype):
        # Rename the few categories instead of millions of strings.
        keys = keys.cat.remove_unused_categories()
        new_keys = keys.cat.rename_categories([key_of[c] for c in keys.cat.categories])
        scales = np.array([scale_of[c] for c in keys.cat.categories])[keys.cat.codes.to_numpy()]
    else:
        new_keys = keys.map(key_of).to_numpy()
        scales = keys.map(scale_of).to_numpy(dtype="float64")
    values = frame["value"].to_numpy(dtype="float64")
    run.scalars = scalars_frame(
        frame["step"].to_numpy(),
        new_keys,
        np.where(scales == 1.0, values, values * scales),
        frame["attempt"].to_numpy(),
        wall_time=frame["wall_time"].to_numpy() if "wall_time" in frame else None,
    )
    run.profile = profile.name
    run.key_map = key_of
    dropped = sorted(set(names) - set(mapping) - {n for n in names if str(n).startswith("_")})
    if dropped:
        run.notes.append(
            f"profile {profile.name!r} dropped {len(dropped)} source name(s): "
            + ", ".join(map(str, dropped[:8])) + (" ..." if len(dropped) > 8 else "")
        )
    if run.tokens_per_step is None:
        run.tokens_per_step = (config_tokens_per_step(run.config)
                               or constant_batch_tokens(run.scalars)
                               or derived_tokens_per_step(run.scalars))
    return run


def config_tokens_per_step(config: dict) -> float | None:
    """The run config's own `tokens_per_step`, when it is a positive number."""
    value = config.get(schema.CONFIG_TOKENS_PER_STEP)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def constant_batch_tokens(scalars: pd.DataFrame) -> float | None:
    """Tokens per step when the run logged a constant batch size in tokens; None otherwise."""
    values = scalars.loc[scalars["key"] == BATCH_TOKENS_KEY, "value"].dropna().unique()
    if len(values) == 1 and values[0] > 0:
        return float(values[0])
    return None


def derived_tokens_per_step(scalars: pd.DataFrame) -> float | None:
    """Tokens per step implied by a cumulative `train/tokens` series that grows linearly."""
    tok = scalars[scalars["key"] == schema.TRAIN_TOKENS]
    if len(tok) < 2:
        return None
    steps = tok["step"].to_numpy(dtype="float64")
    vals = tok["value"].to_numpy(dtype="float64")
    ds, dv = np.diff(steps), np.diff(vals)
    ok = ds > 0
    if not ok.any():
        return None
    rates = dv[ok] / ds[ok]
    rate = float(np.median(rates))
    # A constant batch size gives the same rate everywhere (to float rounding).
    if rate > 0 and np.allclose(rates, rate, rtol=1e-6):
        return rate
    return None
