"""One watched run: the detection engine's incremental states, fed with the rows that arrived since
the last poll, the reference aligned onto exactly the steps each detector judges, and a JSON state
that lets a restarted service carry on where it stopped."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from monitor.alerting.incidents import Progress
from monitor.detectors.base import EVAL_PREFIX
from monitor.detectors.incremental import DetectorState
from monitor.detectors.rundata import concat_rows
from monitor.judging.align import PreparedReference, align_pair
from monitor.judging.engine import DetectionEngine
from monitor.schema import Clean, Detection, RunData, RunInfo
from monitor.store import RunMarks
from monitor.watch import rows
from monitor.watch.references import SharedReferences

log = logging.getLogger("gapwatch.watch")

STATE_VERSION = 3
"""Saved states of another version (their runs carry other fields) are judged again from the start."""


@dataclass
class JudgedBatch:
    detections: list[Detection]
    """New or changed detections (an interval seen before comes back only when it changed)."""
    series: pd.DataFrame
    """Points of detector series (spike scores) for the rows judged, to be stored with the run."""
    progress: dict[tuple[str, str | None], Progress]
    more: bool
    """Rows are left to read: poll again at once."""
    window_end: int
    cleans: list[Clean] = field(default_factory=list)
    """Clean verdicts on the units these rows completed (what ends an incident)."""


def state_name(run: str) -> str:
    """Name under which the store keeps the watch service's state of `run`."""
    return f"watch/{run}"


def watched_runs(store) -> set[str]:
    """The runs the watch service has judged (it keeps a state for each)."""
    return {name.removeprefix(state_name("")) for name in store.state_names(state_name(""))}


def is_watched(store, run: str) -> bool:
    """Whether the watch service has judged `run`, reading only the names of its own states."""
    return state_name(run) in store.state_names(state_name(run))


class RunWatcher:
    def __init__(self, store, run: str, reference: str | None, engine: DetectionEngine,
                 window_steps: int = 50_000, references: SharedReferences | None = None) -> None:
        """`references`: the service's, shared by its watchers (default: this watcher's own)."""
        self.store = store
        self.references = references or SharedReferences(store)
        self.run = run
        self.reference = reference
        self.engine = engine
        self.window_steps = window_steps
        self.state_name = state_name(run)
        self._axis_wanted = engine.config.axis
        self._prepared: PreparedReference | None = None
        self._ref_cache: RunData | None = None
        self._read_for: frozenset[str] = frozenset()
        self._read: set[str] = set()
        self.restore()

    # --- state ---------------------------------------------------------------------------------
    def _fingerprint(self) -> dict[str, str]:
        return self.engine.fingerprint()

    def restore(self) -> None:
        """Load the saved state, or start from the first step if there is none or it was made for
        another reference or other detector settings (the incident logic ignores what it already
        reported, so judging the run again sends nothing twice)."""
        saved = self.store.load_state(self.state_name)
        self.cursor = rows.Cursor()
        self.states: dict[str, DetectorState] = {}
        self.axis = self._axis_wanted
        if saved is None:
            return
        if (saved.get("version") != STATE_VERSION or saved.get("reference") != self.reference
                or saved.get("detectors") != self._fingerprint() or saved.get("axis_wanted") != self._axis_wanted):
            log.info("%s: saved watch state was made with other settings; judging the run from its start", self.run)
            return
        self.cursor = rows.Cursor.from_dict(saved["cursor"])
        self.states = self.engine.states_from_dict(saved["states"])
        self.axis = saved.get("axis", self._axis_wanted)

    def state(self) -> tuple[str, dict[str, Any]]:
        return self.state_name, {
            "version": STATE_VERSION,
            "run": self.run,
            "reference": self.reference,
            "detectors": self._fingerprint(),
            "axis_wanted": self._axis_wanted,
            "axis": self.axis,
            "cursor": self.cursor.to_dict(),
            "states": self.engine.states_to_dict(self.states),
        }

    # --- polling -------------------------------------------------------------------------------
    def poll(self, marks: RunMarks | None = None, info: RunInfo | None = None,
             reference_marks: RunMarks | None = None) -> JudgedBatch | None:
        """Judge what arrived since the last poll; None when nothing did. The run's marks and info
        and the reference's marks are read here unless given (the service reads them for all its
        runs at once)."""
        m = self._judged_series(rows.ours(marks) if marks is not None else rows.marks(self.store, self.run))
        if not rows.has_news(self.cursor, m):
            return None
        info = info or self.store.run_info(self.run)
        batch = rows.read_batch(self.store, self.run, info, self.cursor, m, self.window_steps)
        reference = self._aligned_reference(batch.rows, reference_marks)
        update = self.engine.update(self.states, batch.rows, reference)
        self._trim_reference()
        self._fill_attempts(update.detections)
        return JudgedBatch(update.detections, update.series, rows.progress(self.run, self.cursor, m), batch.more,
                          batch.window_end, update.cleans)

    def has_news(self, marks: RunMarks) -> bool:
        """Whether a series some detector reads, or the events, grew since the last poll."""
        return rows.has_news(self.cursor, self._judged_series(rows.ours(marks)))

    def _judged_series(self, m: RunMarks) -> RunMarks:
        """The marks of the series some detector reads: the others are never read. With a
        reference every series is read, since aligning the reference on the run's steps (tokens,
        the steps logged) looks at all of them."""
        if self.reference is not None:
            return m
        names = frozenset(m.series)
        if names != self._read_for:
            self._read_for = names
            self._read = columns_read(self.engine, sorted(names))
        if len(self._read) == len(m.series):
            return m
        return dataclasses.replace(m, series={k: v for k, v in m.series.items() if k in self._read})

    # --- the reference, aligned onto the run's steps -------------------------------------------
    def _aligned_reference(self, new: RunData, reference_marks: RunMarks | None) -> RunData | None:
        """The reference on every step the detectors will judge: their tails and the new rows.

        Aligned values of steps judged before are kept between polls, so a poll aligns only its new
        rows; when the reference itself changed (a live reference), everything is aligned again.
        """
        reference = self._load_reference(reference_marks)
        if reference is None:
            return None
        if self._ref_cache is None:
            view = new
            for state in self.states.values():
                if state.tail is not None:
                    view = concat_rows(state.tail, view)
            self._ref_cache = self._align(view, reference)
        else:
            fresh = self._align(new, reference)
            cache = self._ref_cache
            scalars = fresh.scalars.combine_first(cache.scalars) if len(cache.scalars) else fresh.scalars
            scalars.index.name = "step"
            nonfinite = pd.concat([cache.logged_nonfinite, fresh.logged_nonfinite], ignore_index=True)
            # Events and repeats are the whole reference's every time: replace, never accumulate.
            self._ref_cache = RunData(info=fresh.info, scalars=scalars.sort_index(), events=fresh.events,
                                      repeats=fresh.repeats,
                                      logged_nonfinite=nonfinite.drop_duplicates(["key", "step"], keep="last"))
        return self._ref_cache

    def _align(self, view: RunData, reference: PreparedReference) -> RunData:
        _, ref = align_pair(view, reference, axis=self.axis)
        if self.axis == "auto":
            # Pin the axis the first judgement chose, so every later poll compares alike.
            self.axis = ref.info.alignment.axis if ref.info.alignment else "auto"
        return ref

    def _trim_reference(self) -> None:
        """Keep of each aligned column what a detector's tail can still ask for: an evaluation
        column from the first step a tail holds of it (a detector interpolates the reference's
        checkpoints between the run's), a dense column only at the steps the tails hold. A tail
        that keeps the run's first row (the data-loader check) would otherwise keep every dense
        step since then, and a poll would cost as much as the run is long."""
        cache = self._ref_cache
        if cache is None or cache.scalars.empty:
            return
        keep_from: dict[str, int] = {}
        held: dict[str, list[np.ndarray]] = {}
        for state in self.states.values():
            tail = state.tail
            if tail is None or tail.scalars.empty:
                continue
            for column in tail.scalars.columns:
                logged = tail.scalars.index[tail.scalars[column].notna().to_numpy()]
                first = int(logged[0]) if len(logged) else int(tail.scalars.index[-1])
                keep_from[column] = min(first, keep_from.get(column, first))
                held.setdefault(column, []).append(tail.scalars.index.to_numpy())
        scalars = cache.scalars[[c for c in cache.scalars.columns if c in keep_from]]
        steps = scalars.index.to_numpy()
        for column in scalars.columns:
            if column.startswith(EVAL_PREFIX):
                drop = steps < keep_from[column]
            else:
                drop = ~np.isin(steps, np.concatenate(held[column]))
            # A rarely logged column of a long reference may be sparse, which takes no assignment:
            # the trimmed cache holds few rows, so it is kept dense.
            values = scalars[column].to_numpy(dtype=float, na_value=np.nan, copy=True)
            values[drop] = np.nan
            scalars[column] = values
        scalars = scalars[scalars.notna().any(axis=1)]
        nf = cache.logged_nonfinite
        nf = nf[nf["key"].map(keep_from).fillna(np.inf).to_numpy() <= nf["step"].to_numpy()]
        self._ref_cache = RunData(info=cache.info, scalars=scalars, events=cache.events, repeats=cache.repeats,
                                  logged_nonfinite=nf.reset_index(drop=True))

    def _load_reference(self, marks: RunMarks | None) -> PreparedReference | None:
        """The reference at full resolution, read again only when it grew (a live reference), and
        prepared once for the polls that align their rows with it (and for the other runs of the
        service judged against it, `references`)."""
        if self.reference is None:
            return None
        m = rows.ours(marks) if marks is not None else rows.marks(self.store, self.reference)
        seen = (m.last_step, sum(n for _, _, n in m.series.values()), m.last_event_id)
        prepared = self.references.get(self.reference, seen)
        if prepared is not self._prepared:
            self._prepared = prepared
            self._ref_cache = None
        return self._prepared

    def _fill_attempts(self, found: list[Detection]) -> None:
        """An incident belongs to the attempt that logged its first flagged step (stable while the
        interval grows, since its first step does not move)."""
        todo = [d for d in found if d.attempt is None]
        if not todo:
            return
        attempts = self.store.latest_attempts(self.run, [(d.metric, int(d.start_step)) for d in todo])
        for d in todo:
            d.attempt = attempts.get((d.metric, int(d.start_step)), 0)


def columns_read(engine: DetectionEngine, keys: list[str]) -> set[str]:
    """Of a run logging `keys` and judged without a reference, the keys some detector reads
    (`Detector.columns`, which looks at the names only); the detectors that need a reference
    judge nothing without one."""
    view = RunData(info=RunInfo(name=""), scalars=pd.DataFrame(
        {k: pd.Series(dtype=float) for k in keys}, index=pd.Index([], dtype="int64", name="step")))
    return {c for d in engine.detectors if not d.needs_reference for c in d.columns(view)}
