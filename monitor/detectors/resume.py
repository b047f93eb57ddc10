"""Resume consistency: what a restart restored, what it replayed, and what it lost.

* At every `resume` event the restored model step must equal the restored data position divided
  by the global batch size (plus the run's cursor offset, 0 or 1, when the run logs its cursor):
  a model restored at step N+1 with the loader at batch N trains every later step on the
  neighbouring batch, silently.
* Steps logged by two attempts (before and after a restart) must agree where the run is
  deterministic: the largest difference is reported.
* A jump in the logged steps larger than the run's logging cadence is lost progress.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from monitor.schema import (
    CONFIG_DETERMINISTIC,
    DATA_CURSOR,
    TRAIN_LOSS,
    EventKind,
    RunData,
    Section,
    Severity,
    Story,
    VerdictRole,
)

from .base import Detector, Reads, ReferenceUse, StoryRole
from .incremental import Incremental
from .rundata import finite
from .stats import cadence


@dataclass
class ResumeConsistency(Detector, Incremental):
    name: ClassVar[str] = "resume"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.DATA
    specificity: ClassVar[int] = 2
    explanation: ClassVar[str] = "the resume did not restore where the run stopped"
    judges: ClassVar[str] = "resumes"
    shown_in: ClassVar[tuple[Section, ...]] = (Section.RESUME,)
    verdict: ClassVar[VerdictRole] = VerdictRole(40, "resume_inconsistent", "Resume inconsistent")
    reads: ClassVar[Reads] = Reads(columns=(DATA_CURSOR,), fields=("gap_metric",))

    replay_metrics: tuple[str, ...] = (TRAIN_LOSS,)
    """Metrics whose values two attempts logged for one step must agree on."""
    replay_atol: float = 1e-6
    """A deterministic replay reproduces the loss bit for bit; 1e-6 absolute (plus 1e-6 relative)
    absorbs only float printing and accumulation order in the logger."""
    replay_rtol: float = 1e-6
    """Relative part of the replay tolerance (see replay_atol)."""
    deterministic: bool | None = None
    """None: trust the run's config key `deterministic`; True/False: override it."""
    gap_factor: float = 1.5
    """A gap is a jump of more than this many logging intervals."""
    gap_metric: str = TRAIN_LOSS
    """The metric whose logged steps show lost progress."""

    def history_points(self, column: str) -> int:
        # The cursor logged before a resume (its counting convention) and the steps around a gap.
        return 4

    def role(self, detection) -> StoryRole:
        """Each rule names what it shows: a resume that restored the model and the data loader at
        different places; a replay that did not reproduce the run; or steps missing from the record,
        which need no resume at all (a crash, an export that samples its rows) and so explain the
        least of the data story."""
        base = super().role(detection)
        rule = detection.evidence.get("rule")
        if rule == "replay":
            return replace(base, explanation="a replay after a restart logged another loss")
        if rule == "gap":
            return replace(base, explanation="steps missing from the record", specificity=0)
        return base

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        out = self._resumes(run) + self._replays(run) + self._gaps(run)
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    # --- restored step vs restored data position ---------------------------------------------------
    def _resumes(self, run: RunData) -> list:
        if run.events.empty:
            return []
        events = run.events[run.events["kind"] == EventKind.RESUME.value]
        if events.empty:
            return []
        out = []
        for ev in events.itertuples(index=False):
            offset = _cursor_offset(run, ev.step)
            payload = ev.payload if isinstance(ev.payload, dict) else {}
            batch = payload.get("global_batch_size") or run.info.global_batch_size
            step, position = payload.get("restored_step"), payload.get("restored_data_position")
            if not batch or step is None or position is None:
                continue
            data_step = float(position) / float(batch) - offset
            shift = data_step - float(step)
            evidence = {"restored_step": int(step), "restored_data_position": float(position),
                        "global_batch_size": int(batch), "data_step": data_step, "delta": shift,
                        "cursor_offset": offset, "attempt": _int(ev.attempt)}
            if abs(shift) < 1e-9:
                continue
            message = (f"resume restored the model at step {int(step)} but the data loader at batch "
                       f"{data_step:g} ({shift:+g} batches): every later step trains on the wrong batch")
            out.append(self._detection(run, None, "event/resume", ev.step, ev.step, ev.step, abs(shift),
                                       Severity.CRITICAL, message, evidence))
        return out

    # --- steps logged twice ------------------------------------------------------------------------
    def _replays(self, run: RunData) -> list:
        rep = run.repeats
        if rep.empty:
            return []
        out = []
        deterministic = self.deterministic
        if deterministic is None:
            deterministic = run.info.config.get(CONFIG_DETERMINISTIC)
        for key in self.replay_metrics:
            r = rep[rep["key"] == key]
            if r.empty:
                continue
            spread = r.groupby("step")["value"].agg(["min", "max", "count"])
            tol = self.replay_atol + self.replay_rtol * spread["max"].abs()
            delta = spread["max"] - spread["min"]
            differ = (delta > tol).to_numpy()
            steps = spread.index.to_numpy()
            evidence = {"rule": "replay", "n": int(len(spread)), "max_delta": float(delta.max()),
                        "steps_differing": int(differ.sum()), "deterministic": deterministic}
            if not differ.any():
                continue
            k = int(np.argmax(delta.to_numpy()))
            severity = Severity.WARNING if deterministic else Severity.INFO
            note = ("the replay after the restart did not reproduce the run: it is not seeing the same "
                    "batches or state" if deterministic else
                    "the run is not marked deterministic, so some difference is expected")
            message = (f"{key} differs between attempts at {int(differ.sum())} of {len(spread)} "
                       f"replayed steps (max {delta.iloc[k]:.3g}): {note}")
            out.append(self._detection(run, None, key, steps[0], steps[-1], steps[k], float(delta.iloc[k]),
                                       severity, message, evidence))
        return out

    # --- lost progress -----------------------------------------------------------------------------
    def _gaps(self, run: RunData) -> list:
        if self.gap_metric not in run.scalars.columns:
            return []
        steps = run.series(self.gap_metric).index.to_numpy()
        if steps.size < 3:
            return []
        usual = cadence(steps)
        jumps = np.diff(steps)
        big = jumps > self.gap_factor * usual
        out = []
        for i in np.flatnonzero(big):
            lost = int(jumps[i] - usual)
            evidence = {"rule": "gap", "last_step_before": int(steps[i]), "next_step": int(steps[i + 1]),
                        "missing_steps": lost, "cadence": usual}
            message = (f"no {self.gap_metric} logged between steps {steps[i]} and {steps[i + 1]}: "
                       + (f"{lost} steps of progress are" if lost != 1 else "1 step of progress is")
                       + " missing from the record")
            out.append(self._detection(run, None, self.gap_metric, steps[i] + 1, steps[i + 1] - 1,
                                       steps[i] + 1, float(lost), Severity.INFO, message, evidence))
        return out


def _cursor_offset(run: RunData, before: int) -> float:
    """0 or 1: whether the run's cursor counts the current step's batch, read from the last cursor
    logged before `before` (the resume), else from the first one; 0 when the run logs none."""
    batch = run.info.global_batch_size
    if DATA_CURSOR not in run.scalars.columns or not batch:
        return 0.0
    cur = finite(run, DATA_CURSOR)
    if cur.empty:
        return 0.0
    earlier = cur[cur.index < before]
    row = earlier.iloc[-1:] if len(earlier) else cur.iloc[:1]
    offset = float(row.iloc[0]) / batch - float(row.index[0])
    return offset if offset in (0.0, 1.0) else 0.0


def _int(v) -> int | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
