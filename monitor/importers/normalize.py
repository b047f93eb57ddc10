"""Turning an importer's raw result (source metric names) into gapwatch keys through a profile,
whole or chunk by chunk."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from monitor import schema

from .imported_run import ImportedRun, scalars_frame
from .input_checks import cut
from .profiles import Profile

# Source columns that carry the tokens of one step, after mapping (OLMo's batch_size_in_tokens).
BATCH_TOKENS_KEY = "train/batch_tokens"


def apply_profile(run: ImportedRun, profile: Profile) -> ImportedRun:
    """Rename (and rescale) run.scalars' keys with the profile; dropped names disappear."""
    mapper = NameMapper(profile, run.source)
    mapper.add(pd.unique(run.scalars["key"]))
    run.scalars = mapper.apply(run.scalars)
    run.profile = profile.name
    run.key_map = mapper.key_map
    run.notes += [n for n in (mapper.dropped_note(), mapper.unmeasured_note()) if n]
    if run.tokens_per_step is None:
        tokens = TokensPerStep()
        tokens.add(run.scalars)
        run.tokens_per_step = tokens.result(run.config)
    return run


class NameMapper:
    """One profile's mapping of source names onto keys, grown name by name as chunks of a source
    reveal them; two names onto one key is an error as soon as the second one appears."""

    def __init__(self, profile: Profile, source: str = "") -> None:
        self.profile = profile
        self.source = source
        self.names: dict[str, None] = {}  # every source name seen, in order
        self._mapping: dict[str, tuple[str, float]] = {}
        self._taken: dict[str, str] = {}
        self.unmeasured: Counter = Counter()  # key -> values left out as "not measured yet"

    @property
    def key_map(self) -> dict[str, str]:
        return {src: key for src, (key, _) in self._mapping.items()}

    @property
    def keys(self) -> list[str]:
        return sorted(key for key, _ in self._mapping.values())

    def add(self, names) -> None:
        for name in names:
            if name in self.names:
                continue
            self.names[name] = None
            hit = self.profile.map_next(name, self._taken, self.source)
            if hit is not None:
                self._mapping[name] = hit

    def apply(self, raw: pd.DataFrame) -> pd.DataFrame:
        """Rows of names added before, renamed and rescaled; dropped names' rows left out."""
        keys = raw["key"]
        if isinstance(keys.dtype, pd.CategoricalDtype):
            # The few categories renamed instead of millions of strings; a category of no
            # mapped name (dropped, or not logged yet) loses its rows.
            targets = [self._mapping.get(c) for c in keys.cat.categories]
            mapped = np.array([t is not None for t in targets])
            codes = keys.cat.codes.to_numpy()
            kept = mapped[codes]
            frame, codes = (raw, codes) if kept.all() else (raw[kept], codes[kept])
            codes = (np.cumsum(mapped) - 1)[codes]  # a category's place among the mapped ones
            new_keys = pd.Categorical.from_codes(codes, categories=[t[0] for t in targets if t is not None])
            scales = np.array([t[1] for t in targets if t is not None])[codes]
        else:
            frame = raw[raw["key"].isin(list(self._mapping))]
            keys = frame["key"]
            new_keys = keys.map(self.key_map).to_numpy()
            scales = keys.map({src: scale for src, (_, scale) in self._mapping.items()}).to_numpy(
                dtype="float64")
        values = frame["value"].to_numpy(dtype="float64")
        out = scalars_frame(
            frame["step"].to_numpy(),
            new_keys,
            np.where(scales == 1.0, values, values * scales),
            frame["attempt"].to_numpy(),
            wall_time=frame["wall_time"].to_numpy() if "wall_time" in frame else None,
        )
        unmeasured = out["key"].isin(schema.NON_NEGATIVE_KEYS).to_numpy() & (out["value"].to_numpy() < 0)
        if unmeasured.any():
            self.unmeasured.update(out.loc[unmeasured, "key"].astype(str).tolist())
            out = out[~unmeasured].reset_index(drop=True)
        return out

    def unmeasured_note(self) -> str | None:
        """What `apply` left out as a trainer's "not measured yet" mark, if anything."""
        if not self.unmeasured:
            return None
        counts = ", ".join(f"{n} of {key}" for key, n in sorted(self.unmeasured.items()))
        return f"left out negative values of quantities that cannot be negative (a trainer's 'not measured yet'): {counts}"

    def dropped_note(self) -> str | None:
        dropped = sorted(n for n in self.names
                         if n not in self._mapping and not str(n).startswith("_"))
        if not dropped:
            return None
        return (f"profile {self.profile.name!r} dropped {len(dropped)} source name(s): "
                + ", ".join(cut(str(n)) for n in dropped[:8]) + (" ..." if len(dropped) > 8 else ""))


class TokensPerStep:
    """Tokens per step of a run: a batch size in tokens it logged as one constant value, else
    the rate of a cumulative `train/tokens` that grows linearly (every step-to-step rate within
    float rounding of their median). Fed the run's mapped rows chunk by chunk in file order, in
    memory that does not grow with the run: the distinct batch sizes and the distinct rates,
    dropped once the rates are too far apart to be one batch size."""

    def __init__(self) -> None:
        self._batch: set[float] = set()
        self._tokens_rows = 0
        self._last: tuple[float, float] | None = None  # (step, value) of the last train/tokens row
        self._rates: Counter = Counter()
        self._nan = False
        self._varies = False

    def add(self, scalars: pd.DataFrame) -> None:
        keys = scalars["key"]
        if len(self._batch) < 2:
            batch = scalars.loc[keys == BATCH_TOKENS_KEY, "value"].dropna().unique()
            self._batch.update(batch.tolist()[:2])
        tok = scalars.loc[keys == schema.TRAIN_TOKENS]
        if not len(tok):
            return
        steps = tok["step"].to_numpy(dtype="float64")
        vals = tok["value"].to_numpy(dtype="float64")
        self._tokens_rows += len(tok)
        if self._last is not None:
            steps, vals = np.r_[self._last[0], steps], np.r_[self._last[1], vals]
        self._last = (steps[-1], vals[-1])
        if self._varies or self._nan:
            return
        ds, dv = np.diff(steps), np.diff(vals)
        ok = ds > 0
        rates = dv[ok] / ds[ok]
        if not len(rates):
            return  # one train/tokens row so far (or one step): no rate yet
        if np.isnan(rates).any():
            self._nan = True  # the median is NaN: no rate
            return
        self._rates.update(rates.tolist())
        lo, hi = min(self._rates), max(self._rates)
        # Every rate must lie within allclose's tolerance of the median, which lies in [lo, hi].
        if hi - lo > 2 * (1e-8 + 1e-6 * max(abs(lo), abs(hi))):
            self._varies = True
            self._rates.clear()

    def result(self, config: dict) -> float | None:
        from_config = config_tokens_per_step(config)
        if from_config:
            return from_config
        if len(self._batch) == 1:
            (value,) = self._batch
            if value > 0:
                return float(value)
        if self._tokens_rows < 2 or self._nan or self._varies or not self._rates:
            return None
        rate = _median(self._rates)
        distinct = np.array(list(self._rates), dtype="float64")
        if rate > 0 and np.allclose(distinct, rate, rtol=1e-6):
            return rate
        return None


def _median(counts: Counter) -> float:
    """np.median of the values counted (the mean of the middle two for an even count)."""
    n = sum(counts.values())
    wanted = [(n - 1) // 2, n // 2]
    picked = []
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        while wanted and wanted[0] < seen:
            picked.append(value)
            wanted.pop(0)
    return float(np.mean(picked))


def config_tokens_per_step(config: dict) -> float | None:
    """The run config's own `tokens_per_step`, when it is a positive number."""
    value = config.get(schema.CONFIG_TOKENS_PER_STEP)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
