"""Data-loader invariants, from the data metrics the trainer logs and the plan in its config.

* Cursor: `data/cursor` (records consumed, all hosts) must advance exactly one global batch per
  step. At the first logged step it must equal (step + o) * global_batch_size with o in {0, 1}
  (logged before or after the step's batch was drawn); the offset o then stays fixed. A loader
  that shards twice advances K global batches per step and fails at the very first logged step;
  a loader restored one batch off keeps the right pace but shifts the offset.
* Coverage: `data/unique_fraction` (share of the corpus seen at least once) must match the plan,
  `data/expected_unique_fraction` when logged, else a plain pass without replacement over
  `records_per_epoch`. When it does not, the logged seen-once/seen-twice-or-more shares are
  compared with sampling with replacement: after x passes' worth of draws, Poisson(x) leaves
  e^-x unseen, x e^-x seen once and the rest more often (x = 1: 36.8% / 36.8% / 26.4%).
* Epochs: `data/epoch` must follow the plan: a fractional epoch (records consumed / records per
  epoch) to within half a global batch, an integer epoch counter changing where the boundaries fall
  (every records_per_epoch records), up to a constant numbering offset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from monitor.schema import (
    DATA_CURSOR,
    DATA_EPOCH,
    DATA_EXPECTED_UNIQUE_FRACTION,
    DATA_SEEN_2PLUS_FRACTION,
    DATA_SEEN_ONCE_FRACTION,
    DATA_UNIQUE_FRACTION,
    NotJudged,
    RunData,
    Section,
    Severity,
    Story,
    VerdictRole,
)

from .base import Detector, Reads, ReferenceUse
from .incremental import Incremental
from .rundata import finite
from .stats import true_runs

COLUMNS = (DATA_CURSOR, DATA_EPOCH, DATA_UNIQUE_FRACTION, DATA_SEEN_ONCE_FRACTION,
           DATA_SEEN_2PLUS_FRACTION, DATA_EXPECTED_UNIQUE_FRACTION)


def poisson_shares(x: float) -> tuple[float, float, float]:
    """(unseen, seen once, seen twice or more) after x passes' worth of draws with replacement."""
    unseen = math.exp(-x)
    once = x * math.exp(-x)
    return unseen, once, 1.0 - unseen - once


@dataclass
class DataInvariants(Detector, Incremental):
    name: ClassVar[str] = "data_invariants"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.DATA
    explanation: ClassVar[str] = "the data loader skipped, repeated or lost data"
    judges: ClassVar[str] = "data-loader invariants"
    keep_first_row: ClassVar[bool] = True  # the cursor offset is fixed by the first logged step
    shown_in: ClassVar[tuple[Section, ...]] = (Section.DATA,)
    verdict: ClassVar[VerdictRole] = VerdictRole(20, "data_loader_invariant_broken", "Data-loader invariant broken")
    reads: ClassVar[Reads] = Reads(columns=COLUMNS)

    cursor_tolerance_records: float = 0.0
    """The cursor counts records exactly, so any difference is a bug; a tolerance in records exists
    only for loaders that log an approximate position."""
    coverage_tolerance: float = 0.01
    """Without replacement the unique share is an exact count. The smallest gap that matters, with
    replacement vs without, is x^2/2: above 0.01 once x passes 0.14 of an epoch."""
    poisson_tolerance: float = 0.05
    """How close the logged (unseen, once, 2+) shares must be to Poisson(x) (L1 distance) to name
    sampling with replacement as the cause."""
    global_batch_size: int | None = None
    """Records per optimizer step over all hosts; None takes RunInfo.global_batch_size."""
    records_per_epoch: int | None = None
    """Records in one pass over the training split; None takes RunInfo.records_per_epoch."""

    def history_points(self, column: str) -> int:
        return 4  # the step before (pace) and the one being judged; the first row is kept for the offset

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        batch = self.global_batch_size or run.info.global_batch_size
        epoch_records = self.records_per_epoch or run.info.records_per_epoch
        out = []
        cursor = finite(run, DATA_CURSOR)
        offset = None
        if batch and len(cursor):
            found, offset = self._cursor(run, cursor, batch)
            out.extend(found)
        if epoch_records:
            out.extend(self._coverage(run, batch, epoch_records, offset))
            if batch and len(cursor):
                out.extend(self._epochs(run, batch, epoch_records, offset))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        batch = self.global_batch_size or run.info.global_batch_size
        epoch_records = self.records_per_epoch or run.info.records_per_epoch
        out = []
        if DATA_CURSOR in run.scalars.columns and not batch:
            out.append(NotJudged(self.name, "the global batch size is unknown (the run's config has no "
                                 "global_batch_size)", DATA_CURSOR,
                                 f"the global batch size: gapwatch runs set {run.name} --global-batch-size N"))
        if DATA_UNIQUE_FRACTION in run.scalars.columns and not epoch_records:
            out.append(NotJudged(self.name, "the records per epoch are unknown (the run's config has no "
                                 "records_per_epoch)", DATA_UNIQUE_FRACTION,
                                 f"the records per epoch: gapwatch runs set {run.name} --records-per-epoch N"))
        return out

    # --- cursor --------------------------------------------------------------------------------
    def _cursor(self, run: RunData, cursor: pd.Series, batch: int):
        steps = cursor.index.to_numpy().astype(float)
        batches = cursor.to_numpy() / batch
        first_offset = batches[0] - steps[0]
        tol = self.cursor_tolerance_records / batch + 1e-9
        # The convention (cursor logged before or after the step's batch) comes from the first
        # step; anything else there is already wrong.
        offset = float(round(first_offset)) if -tol <= first_offset <= 1 + tol and abs(
            first_offset - round(first_offset)) <= tol else None
        # A first step that is already wrong says nothing about the convention: assume the
        # cursor counts the batches of steps 1..s (our trainer's, and the resume rule's).
        expected_offset = offset if offset is not None else 0.0
        deviation = batches - steps - expected_offset
        bad = np.abs(deviation) > tol
        out = []
        for a, b in true_runs(bad):
            k = a + int(np.argmax(np.abs(deviation[a:b + 1])))
            pace = _pace(steps, batches, a, b)
            evidence = {
                "cursor": float(cursor.iloc[a]),
                "expected_cursor": float((steps[a] + expected_offset) * batch),
                "deviation_batches": float(deviation[a]),
                "max_deviation_batches": float(deviation[k]),
                "global_batch_size": int(batch),
                "batches_per_step": pace,
                "offset": expected_offset,
                "n": int(b - a + 1),
            }
            if pace is not None and abs(pace - 1) > 0.5:
                what = (f"the data cursor advances {pace:.3g} global batches per step instead of 1: "
                        f"the loader is sharded {pace:.3g}x (sharded in the sampler and again in the "
                        f"loader?), which resamples the corpus")
            else:
                what = (f"the data cursor is {deviation[a]:+.3g} global batches off the step "
                        f"(cursor {cursor.iloc[a]:.0f}, expected {(steps[a] + expected_offset) * batch:.0f}): "
                        f"model and data loader are out of step")
            out.append(self._detection(run, None, DATA_CURSOR, steps[a], steps[b], steps[k],
                                       float(abs(deviation[k])), Severity.CRITICAL, what, evidence, known=steps[a]))
        return out, expected_offset

    # --- coverage --------------------------------------------------------------------------------
    def _coverage(self, run: RunData, batch, epoch_records: int, offset) -> list:
        unique = finite(run, DATA_UNIQUE_FRACTION)
        if unique.empty:
            return []
        steps = unique.index.to_numpy()
        expected = finite(run, DATA_EXPECTED_UNIQUE_FRACTION).reindex(unique.index)
        passes = None
        if batch:
            passes = (steps + (offset or 0.0)) * batch / epoch_records
            planned = np.minimum(passes, 1.0)  # seen at least once, passing without replacement
            expected = expected.fillna(pd.Series(planned, index=unique.index))
        if expected.isna().all():
            return []
        gap = unique.to_numpy() - expected.to_numpy()
        bad = np.abs(gap) > self.coverage_tolerance
        once = finite(run, DATA_SEEN_ONCE_FRACTION).reindex(unique.index).to_numpy(dtype=float)
        twice = finite(run, DATA_SEEN_2PLUS_FRACTION).reindex(unique.index).to_numpy(dtype=float)
        out = []
        for a, b in true_runs(bad):
            k = a + int(np.argmax(np.abs(gap[a:b + 1])))
            logged = (1.0 - unique.iloc[k], once[k], twice[k])
            evidence = {
                "unique_fraction": float(unique.iloc[k]),
                "expected_unique_fraction": float(expected.iloc[k]),
                "delta": float(gap[k]),
                "band": self.coverage_tolerance,
                "seen_once_fraction": float(once[k]),
                "seen_2plus_fraction": float(twice[k]),
                "n": int(b - a + 1),
            }
            cause = ""
            if passes is not None and np.all(np.isfinite(logged)):
                x = float(passes[k])
                poisson = poisson_shares(x)
                distance = float(np.abs(np.subtract(logged, poisson)).sum())
                evidence.update({"passes": x, "poisson_unseen": poisson[0], "poisson_once": poisson[1],
                                 "poisson_2plus": poisson[2], "poisson_distance": distance})
                if distance <= self.poisson_tolerance:
                    cause = (f"; unseen/once/2+ = {logged[0]:.1%}/{logged[1]:.1%}/{logged[2]:.1%} match "
                             f"Poisson({x:.2g}) ({poisson[0]:.1%}/{poisson[1]:.1%}/{poisson[2]:.1%}): "
                             f"the loader samples with replacement")
            message = (f"data coverage {unique.iloc[k]:.1%} seen vs {expected.iloc[k]:.1%} planned" + cause)
            out.append(self._detection(run, None, DATA_UNIQUE_FRACTION, steps[a], steps[b], steps[k],
                                       float(abs(gap[k]) / self.coverage_tolerance), Severity.CRITICAL
                                       if cause else Severity.WARNING, message, evidence, known=steps[a]))
        return out

    # --- epoch boundaries ------------------------------------------------------------------------
    def _epochs(self, run: RunData, batch: int, epoch_records: int, offset) -> list:
        epoch = finite(run, DATA_EPOCH)
        if epoch.empty:
            return []
        steps = epoch.index.to_numpy()
        consumed = (steps + (offset or 0.0)) * batch
        logged = epoch.to_numpy()
        if np.any(np.abs(logged - np.round(logged)) > 1e-9):
            # A fractional epoch (records consumed / records per epoch) must track the plan: to
            # half a batch when the cursor fixed the counting convention, else to one and a half
            # (logged before or after the step's batch).
            planned = consumed / epoch_records
            gap = logged - planned
            slack = 0.5 if offset is not None else 1.5
            bad = np.abs(gap) > slack * batch / epoch_records
        else:
            planned = np.floor(consumed / epoch_records + 1e-9)
            planned = planned + (logged[0] - planned[0])  # 0- or 1-based, whatever the loader uses
            gap = logged - planned
            # At a boundary, whether the counter has ticked yet depends on when it is logged.
            near = np.abs(consumed - np.round(consumed / epoch_records) * epoch_records) < batch
            bad = (np.abs(gap) > 0.5) & ~(near & (np.abs(gap) <= 1.5))
        out = []
        for a, b in true_runs(bad):
            k = a + int(np.argmax(np.abs(gap[a:b + 1])))
            evidence = {"epoch": float(logged[a]), "expected_epoch": float(planned[a]), "delta": float(gap[k]),
                        "records_per_epoch": int(epoch_records), "global_batch_size": int(batch),
                        "n": int(b - a + 1)}
            message = (f"data epoch {logged[a]:.4g} where the plan has {planned[a]:.4g}: epoch boundaries "
                       f"are not where {epoch_records} records per epoch put them")
            out.append(self._detection(run, None, DATA_EPOCH, steps[a], steps[b], steps[k],
                                       float(abs(gap[k])), Severity.CRITICAL, message, evidence, known=steps[a]))
        return out


def _pace(steps: np.ndarray, batches: np.ndarray, a: int, b: int) -> float | None:
    """Global batches per step over the bad run (including the step before it, when logged);
    for a bad first step, cursor / step."""
    lo = max(a - 1, 0)
    if b > lo and steps[b] > steps[lo]:
        return float((batches[b] - batches[lo]) / (steps[b] - steps[lo]))
    if steps[a] > 0:
        return float(batches[a] / steps[a])
    return float(batches[a]) if batches[a] > 0 else None

