"""DeepSpeed's monitor numbers its series by samples seen: placed on optimizer steps.

With a monitor on in its config (`tensorboard`, `wandb`, `csv_monitor`), DeepSpeed's engine writes
`Train/Samples/train_loss`, `Train/Samples/lr`, `Train/Samples/loss_scale` (and, with
wall_clock_breakdown, `Train/Samples/elapsed_time_ms_*`) at `global_samples`, the samples consumed
so far, once every optimizer step; with `eigenvalue` on, `Train/Eigenvalues/ModelBlockParam_<i>`
at the samples seen too, every few steps. Read as steps, a run of 64 samples a step is at "step"
6,400 after 100 steps and pairs with nothing another trainer logged at its step 100. Each such
series is placed at samples / (samples a step): the one spacing between consecutive values of every
Samples series (a run resumed from a checkpoint goes on at the same spacing). Where the spacing
varies (a batch size that ramps up), or a value falls between two steps, they keep their samples,
and a note says so.

A source read in parts (a streamed table, a followed W&B run) is placed part by part with the
same rule (`SampleSteps`): the series' rows wait until two values of one of them give the spacing,
and a later part whose spacing differs, once rows were placed, raises `SpacingChanged` (a streamed
import then reads the source again, keeping the samples; a follow stops, saying so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.errors import GapwatchError

from .imported_run import ImportedRun

SAMPLES = "Train/Samples/"
# Logged at the samples seen too, every few optimizer steps (`eigenvalue_gas_boundary_resolution`):
# placed at the spacing the Samples series give, never giving it.
EIGENVALUES = "Train/Eigenvalues/"


class SpacingChanged(GapwatchError):
    """Rows were placed on steps at one spacing, and a later part of the source has another: `why`
    they keep their samples after all."""

    def __init__(self, per_step: int, why: str) -> None:
        super().__init__(f"{SAMPLES}* (DeepSpeed's monitor) were placed on optimizer steps at {per_step:,} "
                         f"samples a step, and later values are not (a batch size that changed): {why}")
        self.why = why


class SampleSteps:
    """Places the `Train/Samples/` rows of a source read in parts, in file order.

    keep: why they keep their samples, decided before (a pass that met SpacingChanged); "" to
    decide from the rows."""

    def __init__(self, keep: str = "") -> None:
        self.per_step: int | None = None
        self.kept_because = keep
        self.seen = False  # any Train/Samples/ row
        self.only_samples = True  # every row of the source so far
        self._last: dict[tuple[str, int], int] = {}
        self._held: list[pd.DataFrame] = []

    @property
    def placed(self) -> bool:
        return self.per_step is not None

    def place(self, scalars: pd.DataFrame, final: bool = False) -> pd.DataFrame:
        """The rows of the next part that can be handed on now: the series' rows on steps once the
        spacing is known (with the rows that waited for it before them), the other rows as they
        are. final: no part follows, so nothing waits (rows of an unknown spacing keep their samples)."""
        mine = _named_by(scalars["key"], (SAMPLES, EIGENVALUES))
        self.only_samples &= bool(mine.all())
        if not mine.any():
            return self._unknown(scalars) if final and self._held else scalars
        self.seen = True
        if self.kept_because:
            return scalars
        gaps, steps = self._gaps(scalars.loc[mine])
        if self.per_step is None:
            if len(gaps) > 1:
                return self._keep("their samples grow by different numbers between values", scalars)
            if not gaps:
                if final:
                    return self._unknown(scalars)
                self._held.append(scalars.loc[mine])
                return scalars.loc[~mine]
            self.per_step = gaps.pop()
            if self._off_grid(steps):
                self.per_step = None
                return self._keep("some fall between two steps", scalars)
        elif gaps - {self.per_step}:
            raise SpacingChanged(self.per_step, "their samples grow by different numbers between values further on")
        elif self._off_grid(steps):
            raise SpacingChanged(self.per_step, "some further on fall between two steps")
        return self._released(self._on_steps(scalars, mine))

    def rest(self) -> pd.DataFrame | None:
        """Rows still waiting once the source ended (no spacing was ever known), on their samples."""
        return self._unknown(None) if self._held else None

    def events(self, events: list[dict]) -> list[dict]:
        """Restarts are on samples too where every series was (their steps are the source's)."""
        if not (self.placed and self.only_samples):
            return events
        return [{**e, "step": int(e["step"]) // self.per_step} for e in events]

    def note(self, source: str) -> str | None:
        if self.placed:
            return (f"{source}: {SAMPLES}* (DeepSpeed's monitor) are numbered by samples seen: placed on "
                    f"optimizer steps at {self.per_step:,} samples a step")
        if self.seen and self.kept_because:
            return (f"{source}: {SAMPLES}* (DeepSpeed's monitor) are numbered by samples seen, and are left "
                    f"so: {self.kept_because}")
        return None

    def _gaps(self, rows: pd.DataFrame) -> tuple[set[int], np.ndarray]:
        """The spacings between consecutive values of each Samples series in each attempt (from its
        last value in the parts before), and every step of these rows and of those that wait."""
        gaps: set[int] = set()
        spaced = rows.loc[_named_by(rows["key"], (SAMPLES,))]
        for (key, attempt), group in spaced.groupby(["key", "attempt"], observed=True, sort=False):
            steps = np.unique(group["step"].to_numpy())
            last = self._last.get((str(key), int(attempt)))
            if last is not None:
                steps = np.unique(np.append(steps, last))
            gaps.update(np.diff(steps).tolist())
            self._last[(str(key), int(attempt))] = int(steps[-1])
        held = [h["step"].to_numpy() for h in self._held]
        return gaps, np.concatenate([rows["step"].to_numpy(), *held])

    def _off_grid(self, steps: np.ndarray) -> bool:
        return bool((steps % self.per_step).any())

    def _unknown(self, scalars: pd.DataFrame | None) -> pd.DataFrame:
        """The source ended before any series gave a spacing: its rows keep their samples."""
        return self._keep(f"no {SAMPLES} series logged two values", scalars)

    def _keep(self, why: str, scalars: pd.DataFrame | None) -> pd.DataFrame:
        self.kept_because = why
        return self._released(scalars)

    def _on_steps(self, scalars: pd.DataFrame, mine: np.ndarray) -> pd.DataFrame:
        steps = scalars["step"].to_numpy().copy()
        steps[mine] //= self.per_step
        self._held = [h.assign(step=h["step"].to_numpy() // self.per_step) for h in self._held]
        return scalars.assign(step=steps)

    def _released(self, scalars: pd.DataFrame | None) -> pd.DataFrame:
        """The rows that waited, then `scalars`: file order."""
        parts = [*self._held, *([scalars] if scalars is not None else [])]
        self._held = []
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _named_by(keys: pd.Series, prefixes: tuple[str, ...]) -> np.ndarray:
    """Which rows are of a series whose name starts with one of `prefixes` (a categorical key
    column is read by its categories, not row by row: a streamed chunk holds a million rows of a
    few names)."""
    if isinstance(keys.dtype, pd.CategoricalDtype):
        named = np.asarray(keys.cat.categories.astype(str).str.startswith(prefixes), dtype=bool)
        if not named.any():
            return np.zeros(len(keys), dtype=bool)
        return np.append(named, False)[keys.cat.codes.to_numpy()]  # code -1 (no key) is last
    return keys.astype(str).str.startswith(prefixes).to_numpy()


def on_steps(run: ImportedRun) -> ImportedRun:
    """`run` with its `Train/Samples/` series on optimizer steps (see the module docstring)."""
    samples = SampleSteps()
    run.scalars = samples.place(run.scalars, final=True)
    run.events = samples.events(run.events)
    note = samples.note(run.source)
    if note:
        run.notes.append(note)
    return run
