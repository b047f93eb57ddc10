"""Which steps of a run its reference covers, for one metric, and how to say so.

Alignment (monitor/judging/align.py) keeps a reference's values only where they pair fairly with
the run's: past the step where a reference stopped, the aligned reference has no value, and a
metric the two runs logged at no common step leaves the aligned frames altogether. Told from the
frames alone, both read as "the reference logs no train/loss". The alignment's record keeps where
the reference logged each metric both runs logged (`Alignment.metrics[key]`: `reference_steps`,
`reference_at`, `reference_points`), so that what was compared, and what was not, is said with
the steps of each side.

Only steps the run logged beyond its reference's are worth a word: a run that ends before its
reference is still going, and is compared up to its last step. A stretch no longer than the
reference's own logging interval is where its next value would have fallen, not a reference that
stopped (a reference logged every 10 steps whose last value is at step 9,990 covers a run that
ends at 10,000).
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.schema import RunData

from .rundata import finite

Span = tuple[int, int]


@dataclass(frozen=True)
class Overlap:
    """One metric of a run and its aligned reference: where each logged it, and where both did."""

    metric: str
    axis: str
    """"step" or "tokens": on tokens the reference's own steps are not the run's."""
    run: Span
    """First and last step at which the run logged a finite value."""
    reference: Span
    """First and last step at which the reference logged the metric, in its own steps."""
    reference_at: Span
    """The same two steps placed on the run's axis."""
    compared: Span | None
    """First and last step at which both have a finite value; None when there is none."""
    before: Span | None = None
    """The run's steps logged before the reference starts (None: the reference starts first)."""
    after: Span | None = None
    """The run's steps logged after the reference stops (None: the run ends first)."""

    def clause(self) -> str:
        """"compared on steps 1–900 of the run's 3,000: the reference stops at step 900"; empty
        when there is nothing to say: the reference covers every step the run logged, or the two
        share none (`no_common_step` says that)."""
        if self.compared is None or (self.before is None and self.after is None):
            return ""
        first, last = self.run
        of = f"{last:,}" if first <= 1 else f"{first:,}–{last:,}"
        by = " (paired by tokens)" if self.axis == "tokens" else ""
        ends = self._ends(self.before is not None, self.after is not None)
        return f"compared on {steps(self.compared)} of the run's {of}{by}: the reference {ends}"

    def not_compared(self, min_steps: float = 0.0) -> str:
        """The run's steps that the reference does not reach, for a "not judged" line ("on steps
        901–3,000: the reference stops at step 900"); empty when those stretches are shorter than
        `min_steps` (a detector's unit of judgement) or there are none."""
        early = self.before is not None and self.reference_at[0] - self.before[0] >= min_steps
        late = self.after is not None and self.after[1] - self.reference_at[1] >= min_steps
        if self.compared is None or not (early or late):
            return ""
        stretches = [s for s, said in ((self.before, early), (self.after, late)) if said]
        return f"on {' and '.join(steps(s) for s in stretches)}: the reference {self._ends(early, late)}"

    def no_common_step(self) -> str:
        """Why nothing was compared, with the steps of each side: "the runs logged train/loss at no
        common step: the run at steps 1,000–3,000, the reference at steps 1–900"."""
        if self.axis == "tokens":
            return (f"the runs logged {self.metric} at no common number of tokens: the run at {steps(self.run)}, "
                    f"the reference at {steps(self.reference)} (the run's {steps(self.reference_at)} by tokens)")
        return (f"the runs logged {self.metric} at no common step: the run at {steps(self.run)}, the reference "
                f"at {steps(self.reference)}")

    def _ends(self, starts: bool, stops: bool) -> str:
        ends = []
        if starts:
            ends.append(f"starts at {self._point(0)}")
        if stops:
            ends.append(f"stops at {self._point(1)}")
        return " and ".join(ends)

    def _point(self, end: int) -> str:
        if self.axis == "tokens":
            return f"its step {self.reference[end]:,} (the run's step {self.reference_at[end]:,} by tokens)"
        return f"step {self.reference_at[end]:,}"


def steps(span: Span) -> str:
    first, last = span
    return f"step {first:,}" if first == last else f"steps {first:,}–{last:,}"


def overlap(run: RunData, reference: RunData, metric: str) -> Overlap | None:
    """`metric` of `run` (as logged) against `reference` (aligned on the run's steps; or, unaligned,
    a reference on the run's own steps); None when the run has no finite value of it, or the
    reference none where it pairs with the run's (it logged none, or only NaN or Inf there)."""
    mine = finite(run, metric)
    if mine.empty:
        return None
    theirs = finite(reference, metric)
    alignment = reference.info.alignment
    record = alignment.metrics.get(metric, {}) if alignment is not None else {}
    if "reference_steps" in record and (record["points"] == 0 or len(theirs)):
        own, at, points = tuple(record["reference_steps"]), tuple(record["reference_at"]), record["reference_points"]
    elif len(theirs):
        own = at = (int(theirs.index[0]), int(theirs.index[-1]))
        points = len(theirs)
    else:
        return None
    common = mine.index.intersection(theirs.index)
    logged = mine.index.to_numpy()
    # A stretch within one logging interval of the reference is where its next value would fall.
    interval = (at[1] - at[0]) / (points - 1) if points > 1 else 0.0
    early = logged[logged < at[0]] if at[0] - logged[0] > interval else logged[:0]
    late = logged[logged > at[1]] if logged[-1] - at[1] > interval else logged[:0]
    return Overlap(
        metric=metric, axis=alignment.axis if alignment is not None else "step",
        run=(int(logged[0]), int(logged[-1])), reference=own, reference_at=at,
        compared=(int(common[0]), int(common[-1])) if len(common) else None,
        before=(int(early[0]), int(early[-1])) if len(early) else None,
        after=(int(late[0]), int(late[-1])) if len(late) else None,
    )
