"""Throughput: stalls, periodic pauses, MFU / tokens-per-second drops, and goodput.

Step times follow the goodput convention of AI-Hypercomputer/ml-goodput-measurement: within a
block of `block_points` steps, the ideal step time is the mean of the step times at most
median + 3 MAD (unscaled MAD), and a step above median + 3 MAD is anomalous. Each step is judged
against the previous complete block (the run's first block against itself, once complete), so the
verdict on a step never changes as later rows arrive, and every rule below is judged from what came
before, so the watch service reaches the verdicts a whole-run pass reaches.

* Stall: an anomalous step at least `stall_ratio` times the ideal (consecutive ones form one) that
  loses at least `min_stall_s` seconds; a WARNING when that is `stall_warning_share` of the run's
  time so far, else INFO.
* Periodic pauses: an anomalous step that, with the `periodic_min_count` - 1 before it, keeps a
  near-constant spacing (evaluation, garbage collection, synchronous checkpoints) continues a
  periodic pattern: one detection per stretch, with its period and the time it cost (WARNING once
  that reached 1 - `min_goodput` of the run's time). The pauses before the pattern was recognisable
  are stalls.
* Drops: the median of `perf/mfu`, `perf/tokens_per_s` or `perf/device_tokens_per_s` (one device's
  share, all that OLMo-core, torchtitan or torchtune log) over a complete block of
  `drop_block_points` steps falls more than `drop_fraction` below the median of the preceding
  `baseline_blocks` such medians (the run's own baseline) for `persist_blocks` blocks; and against
  the reference, where it logs the same metric, block by block on the aligned axis.
* Goodput: ideal over actual time of each complete block of step times; blocks below `min_goodput`
  are reported (metric perf/goodput).

A stall, a drop (against the run's own baseline or the reference) or a goodput finding cites the host's load (sys/load_per_cpu, where the run logs it)
in its window, and says the machine was loaded when that reached `busy_host_load`: on a shared host a
slow step is news about the machine, not the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from monitor.schema import (
    PERF_DEVICE_TOKENS_PER_S,
    PERF_MFU,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    SYS_LOAD_PER_CPU,
    Drawing,
    NotJudged,
    RunData,
    Section,
    Severity,
    Story,
)

from .base import Detector, Reads
from .incremental import Incremental
from .rundata import finite, logging_interval, pinned
from .stats import cadence, signed_runs, true_runs, window_summaries


@dataclass
class ThroughputDetector(Detector, Incremental):
    name: ClassVar[str] = "throughput"
    story: ClassVar[Story] = Story.THROUGHPUT
    explanation: ClassVar[str] = "steps slowed down or stalled"
    judges: ClassVar[str] = "throughput and stalls"
    shown_in: ClassVar[tuple[Section, ...]] = (Section.THROUGHPUT,)
    draws: ClassVar[tuple[Drawing, ...]] = (Drawing.GOODPUT,)
    caveat: ClassVar[bool] = True
    reads: ClassVar[Reads] = Reads(columns=(PERF_STEP_TIME_S, SYS_LOAD_PER_CPU), fields=("drop_metrics",))

    block_points: int = 1000
    """The goodput library computes the ideal over the whole job; blocks of 1,000 steps let the
    ideal follow real changes (a new sequence length, a resized job) in long runs."""
    mad_factor: float = 3.0
    """ml-goodput-measurement: a step time above median + 3 MAD is not "normal"."""
    stall_ratio: float = 2.0
    """An anomalous step that takes twice the ideal is a stall (small MADs in very steady runs
    would otherwise call a few percent of jitter one)..."""
    stall_warning_share: float = 0.01
    """A stall that cost 1% of the run's time so far is a WARNING, a smaller one INFO: a 2 s pause
    in a run that has been going for an hour costs nothing anyone would act on."""
    min_stall_s: float = 1.0
    """...and that loses at least a second: a busy host makes a 60 ms step take 150 ms now and
    then, which costs nothing anyone would act on."""
    pause_excess: float = 0.10
    """A pause worth timing is an anomalous step at least 10% over the ideal: the goodput bound
    alone (median + 3 unscaled MAD, about 2 sigma) also passes 2% of normal steps."""
    periodic_min_count: int = 5
    """Periodic pauses: at least 5 pauses whose spacing is within 10% of the commonest one."""
    period_tolerance: float = 0.1
    """Spacings within this share of the commonest one count as the same period."""
    min_period_steps: int = 2
    """Slow steps one after another are a slow stretch (a busy host, an eval), not a pause that
    recurs: a period is at least two steps."""
    drop_block_points: int = 100
    """A healthy run's 100-step medians of MFU or tokens/s jitter by a few percent; a 10% drop held
    for two blocks is a real slowdown."""
    drop_fraction: float = 0.10
    """A block median this share below the baseline is a drop."""
    baseline_blocks: int = 50
    """The run's own baseline: the median of the previous 50 block medians (5,000 steps)."""
    persist_blocks: int = 2
    """Consecutive dropped blocks that make a detection."""
    min_goodput: float = 0.90
    """Below 90% goodput a run loses more than one step in ten to stalls and pauses."""
    cadence_points: int = 32
    """Block widths follow the logging interval of each metric's first 32 logged steps."""
    drop_metrics: tuple[str, ...] = (PERF_MFU, PERF_TOKENS_PER_S, PERF_DEVICE_TOKENS_PER_S)
    """The throughput metrics judged for drops (higher is better)."""
    busy_host_load: float = 1.5
    """Load average per CPU from which a finding says the host was loaded: half again as many
    runnable tasks as CPUs, so the run waited for a CPU (a CPU-bound run alone keeps it near 1)."""

    def history_points(self, column: str) -> int:
        # Step times: the block a step is judged by and its own; the pauses a periodic pattern is
        # recognised from are carried (`carry`). Throughput: the baseline blocks and a run of drops.
        step_times = 2 * self.block_points + self.periodic_min_count
        throughput = (self.baseline_blocks + self.persist_blocks + 1) * self.drop_block_points
        if column == PERF_STEP_TIME_S:
            return step_times
        if column == SYS_LOAD_PER_CPU:  # cited over any window the other two can flag
            return max(step_times, throughput)
        return throughput

    def pin(self, run: RunData, pinned: dict) -> dict:
        pinned = super().pin(run, pinned)
        times = _times(run)
        if len(times) and "throughput:first_step" not in pinned:
            pinned["throughput:first_step"] = int(times.index[0])
        return pinned

    def carry(self, run: RunData, keep_from: dict[str, float], pinned: dict) -> dict:
        """The recent anomalous steps (for the periodic rule) and the time elapsed before the tail,
        which stall severities are shares of."""
        times = _times(run)
        if times.empty:
            return pinned
        cut = keep_from.get(PERF_STEP_TIME_S, -np.inf)
        dropped = times[times.index < cut]
        pinned["throughput:elapsed_s"] = float(pinned.get("throughput:elapsed_s", 0.0) + dropped.sum())
        verdicts = self.step_verdicts(run, times)
        mine = verdicts.loc[verdicts["anomalous"], ["step", "excess"]].to_numpy().tolist()
        first = mine[0][0] if mine else np.inf
        earlier = [a for a in pinned.get("throughput:anomalies", []) if a[0] < first]
        pinned["throughput:anomalies"] = (earlier + mine)[-(self.periodic_min_count + 1):]
        return pinned

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        out = []
        times = _times(run)
        if len(times) >= 2:
            out.extend(self._step_times(run, times))
        for metric in self.drop_metrics:
            x = finite(run, metric)
            if len(x) >= 2:
                out.extend(self._drops(run, metric, x))
                if reference is not None:
                    out.extend(self._vs_reference(run, reference, metric, x))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def not_judged(self, run: RunData, reference: RunData | None = None) -> list[NotJudged]:
        if not set(self.columns(run)) - {SYS_LOAD_PER_CPU}:
            return [NotJudged(self.name, f"the run logs none of {PERF_STEP_TIME_S}, "
                              f"{', '.join(self.drop_metrics)}")]
        times = finite(run, PERF_STEP_TIME_S)
        if 0 < len(times) < self.block_points:
            return [NotJudged(self.name, f"{len(times)} step times; the ideal step time is measured over a block "
                              f"of {self.block_points}", PERF_STEP_TIME_S, f"{self.block_points - len(times)} more "
                              f"logged steps")]
        return []

    # --- step times --------------------------------------------------------------------------------
    def step_verdicts(self, run: RunData, times: pd.Series, finished: bool = False) -> pd.DataFrame:
        """Per step time: the ideal and the anomaly bound of the block it is judged by (the previous
        complete block; the run's first block by itself once complete; NaN where neither is known),
        and whether it is anomalous (above the bound and `pause_excess` over the ideal). For a
        `finished` run (a report's goodput) a block with no complete one before it is judged by
        itself, however short."""
        steps, t = times.index.to_numpy(), times.to_numpy()
        interval = logging_interval(run, PERF_STEP_TIME_S, self.cadence_points) or cadence(steps)
        width = self.block_points * interval
        ids = np.floor_divide(steps, width).astype(np.int64)
        uniq, start = np.unique(ids, return_index=True)
        counts = np.diff(np.append(start, ids.size))
        ideal = np.full(uniq.size, np.nan)
        bound = np.full(uniq.size, np.nan)
        for i, (a, n) in enumerate(zip(start, counts)):
            block = t[a:a + n]
            med = np.median(block)
            bound[i] = med + self.mad_factor * np.median(np.abs(block - med))
            ideal[i] = block[block <= bound[i]].mean()
        last_step = float(steps[-1])
        complete = ((uniq + 1) * width - interval <= last_step) & (counts >= self.block_points // 2)
        first = pinned(run, "throughput:first_step")
        first_block = int(np.floor_divide(first if first is not None else steps[0], width))
        judge = np.full(uniq.size, -1)
        for i in range(uniq.size):
            if i > 0 and uniq[i - 1] == uniq[i] - 1 and complete[i - 1]:
                judge[i] = i - 1
            elif (uniq[i] == first_block and complete[i]) or finished:
                judge[i] = i  # the run's first block, by itself, once it is whole
        pos = np.repeat(np.arange(uniq.size), counts)
        by = judge[pos]
        ok = by >= 0
        step_ideal = np.where(ok, ideal[np.clip(by, 0, None)], np.nan)
        step_bound = np.where(ok, bound[np.clip(by, 0, None)], np.nan)
        with np.errstate(invalid="ignore"):
            anomalous = (t > step_bound) & (t >= (1 + self.pause_excess) * step_ideal)
        return pd.DataFrame({"step": steps, "time": t, "ideal": step_ideal, "bound": step_bound,
                             "anomalous": anomalous, "excess": np.where(anomalous, t - step_ideal, 0.0),
                             "block": ids})

    def _step_times(self, run: RunData, times: pd.Series) -> list:
        v = self.step_verdicts(run, times)
        steps, t, ideal = v["step"].to_numpy(), v["time"].to_numpy(), v["ideal"].to_numpy()
        elapsed = float(pinned(run, "throughput:elapsed_s") or 0.0) + np.cumsum(t)
        periodic = self._periodic(run, v)
        out = self._periodic_detections(run, v, periodic, elapsed)
        anomalous = v["anomalous"].to_numpy() & ~periodic
        stall = anomalous & (t >= self.stall_ratio * ideal)
        for a, b in true_runs(stall):
            k = a + int(np.argmax(t[a:b + 1] / ideal[a:b + 1]))
            lost = float((t[a:b + 1] - ideal[a:b + 1]).sum())
            if lost < self.min_stall_s:
                continue
            share = lost / float(elapsed[b])
            evidence = {"rule": "stall", "step_time_s": float(t[k]), "ideal_s": float(ideal[k]),
                        "ratio": float(t[k] / ideal[k]), "bound_s": float(v["bound"].iloc[k]), "lost_s": lost,
                        "lost_share": share, "band": self.stall_warning_share, "n": int(b - a + 1)}
            severity = Severity.WARNING if share >= self.stall_warning_share else Severity.INFO
            load, loaded = self._host_load(run, steps[a], steps[b])
            evidence.update(load)
            message = (f"stall: step took {t[k]:.3g} s, {t[k] / ideal[k]:.1f}x the ideal {ideal[k]:.3g} s "
                       f"({lost:.3g} s lost, {share:.2%} of the run's time so far){loaded}")
            out.append(self._detection(run, None, PERF_STEP_TIME_S, steps[a], steps[b], steps[k],
                                       float(t[k] / ideal[k]), severity, message, evidence))
        out.extend(self._goodput(run, v))
        return out

    def _periodic(self, run: RunData, v: pd.DataFrame) -> np.ndarray:
        """Mask of the anomalous steps that continue a periodic pattern: the anomaly and the
        `periodic_min_count` - 1 before it (these and the ones the tail dropped) are spaced within
        `period_tolerance` of their median spacing, at least `min_period_steps` apart. Each step is
        judged by the anomalies up to it, so the verdict never changes as the run goes on."""
        earlier = [(float(s), float(e)) for s, e in pinned(run, "throughput:anomalies") or []]
        mine = v.loc[v["anomalous"].to_numpy(), "step"].to_numpy(dtype=float)
        known = np.array(sorted({s for s, _ in earlier if s < (mine[0] if mine.size else np.inf)}) + list(mine))
        mask = np.zeros(len(v), dtype=bool)
        if known.size < self.periodic_min_count:
            return mask
        row_of = {float(s): i for i, s in enumerate(v["step"].to_numpy(dtype=float))}
        n = self.periodic_min_count
        for j in range(n - 1, known.size):
            if known[j] not in row_of:
                continue
            gaps = np.diff(known[j - n + 1:j + 1])
            period = float(np.median(gaps))
            if period >= self.min_period_steps and np.all(np.abs(gaps - period) <= self.period_tolerance * period):
                mask[row_of[known[j]]] = True
        return mask

    def _periodic_detections(self, run: RunData, v: pd.DataFrame, periodic: np.ndarray, elapsed: np.ndarray) -> list:
        """One detection per stretch of periodic pauses, with its period and the time it cost;
        severity by the largest share of the run's time the pauses had taken at any pause (so it
        only grows as the run goes on)."""
        idx = np.flatnonzero(periodic)
        if idx.size == 0:
            return []
        steps, excess = v["step"].to_numpy(), v["excess"].to_numpy()
        out = []
        groups = np.split(idx, np.flatnonzero(np.diff(steps[idx]) > 2 * np.median(np.diff(steps[idx]))
                                              if idx.size > 1 else []) + 1)
        for group in groups:
            lost = np.cumsum(excess[group])
            share = float(np.max(lost / elapsed[group]))
            period = float(np.median(np.diff(steps[group]))) if group.size > 1 else float("nan")
            k = int(group[np.argmax(excess[group])])
            evidence = {"rule": "periodic", "period_steps": period, "n": int(group.size),
                        "mean_excess_s": float(lost[-1] / group.size), "lost_s": float(lost[-1]),
                        "lost_share": share, "band": 1 - self.min_goodput}
            severity = Severity.WARNING if share >= 1 - self.min_goodput else Severity.INFO
            message = (f"step time jumps every {period:.0f} steps ({group.size} times so far, "
                       f"+{lost[-1] / group.size:.3g} s each, up to {share:.1%} of the time): a periodic pause "
                       f"such as evaluation, garbage collection or a synchronous checkpoint")
            out.append(self._detection(run, None, PERF_STEP_TIME_S, steps[group[0]], steps[group[-1]], steps[k],
                                       share, severity, message, evidence, known=steps[group[0]]))
        return out

    def _goodput(self, run: RunData, v: pd.DataFrame) -> list:
        """Goodput (ideal over actual time) of every complete block of step times; consecutive blocks
        below `min_goodput` are one detection (metric perf/goodput)."""
        judged = v[np.isfinite(v["ideal"].to_numpy())]
        if judged.empty:
            return []
        blocks = judged.groupby("block").agg(first=("step", "min"), last=("step", "max"), n=("step", "size"),
                                            ideal=("ideal", "sum"), actual=("time", "sum"))
        steps = v["step"].to_numpy()
        interval = logging_interval(run, PERF_STEP_TIME_S, self.cadence_points) or cadence(steps)
        width = self.block_points * interval
        complete = ((blocks.index.to_numpy() + 1) * width - interval <= float(steps[-1])) \
            & (blocks["n"].to_numpy() >= self.block_points // 2)
        blocks = blocks[complete]
        # Lost time is never negative: a block faster than the ideal the block before it set lost none.
        goodput = np.minimum(1.0, (blocks["ideal"] / blocks["actual"]).to_numpy())
        out = []
        for a, b in signed_runs(goodput < self.min_goodput, -np.ones(goodput.size), blocks.index.to_numpy(), 1):
            k = a + int(np.argmin(goodput[a:b + 1]))
            sl = blocks.iloc[a:b + 1]
            evidence = {"rule": "goodput", "goodput": float(goodput[k]), "band": self.min_goodput,
                        "ideal_time_s": float(sl["ideal"].sum()), "actual_time_s": float(sl["actual"].sum()),
                        "blocks": int(b - a + 1), "n": int(sl["n"].sum())}
            load, loaded = self._host_load(run, sl["first"].iloc[0], sl["last"].iloc[-1])
            evidence.update(load)
            message = (f"goodput {goodput[k]:.1%} over {self.block_points} steps: "
                       f"{sl['actual'].sum() - sl['ideal'].sum():.4g} s of {sl['actual'].sum():.4g} s went to steps "
                       f"slower than the ideal{loaded}")
            out.append(self._detection(run, None, "perf/goodput", sl["first"].iloc[0], sl["last"].iloc[-1],
                                       blocks["first"].iloc[k], float(1 - goodput[k]), Severity.WARNING, message,
                                       evidence, known=sl["last"].iloc[0]))
        return out

    # --- MFU / tokens per second ------------------------------------------------------------------
    def settled_before(self, run: RunData, first_new: float) -> float:
        widths = [self.block_points * (logging_interval(run, PERF_STEP_TIME_S, self.cadence_points) or 1.0)]
        widths += [self.drop_block_points * (logging_interval(run, m, self.cadence_points) or 1.0)
                   for m in self.drop_metrics]
        return first_new - max(widths)

    def _blocks(self, run: RunData, metric: str, x: pd.Series):
        """Medians of `metric` in blocks of drop_block_points logging intervals, and which blocks
        are complete (logged past, and half full)."""
        steps = x.index.to_numpy()
        interval = logging_interval(run, metric, self.cadence_points) or cadence(steps)
        width = self.drop_block_points * interval
        w = window_summaries(steps, x.to_numpy(), width, medians_only=True)
        complete = ((w.ids + 1) * width - interval <= float(steps[-1])) & (w.n >= self.drop_block_points // 2)
        return w, complete, width

    def _drops(self, run: RunData, metric: str, x: pd.Series) -> list:
        w, complete, _ = self._blocks(run, metric, x)
        med = pd.Series(np.where(complete, w.median, np.nan))
        base = med.rolling(self.baseline_blocks, min_periods=min(5, self.baseline_blocks)).median().shift(1).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = w.median / base - 1.0
        flag = complete & (rel < -self.drop_fraction)
        out = []
        for a, b in signed_runs(flag, rel, w.ids, self.persist_blocks):
            k = a + int(np.argmin(rel[a:b + 1]))
            evidence = {"rule": "drop", "value": float(w.median[k]), "baseline": float(base[a]), "delta": float(rel[k]),
                        "band": -self.drop_fraction, "blocks": int(b - a + 1), "n": int(w.n[a:b + 1].sum())}
            load, loaded = self._host_load(run, w.first_step[a], w.last_step[b])
            evidence.update(load)
            message = (f"{metric} {w.median[k]:.4g}, {-rel[k]:.0%} below the run's own baseline "
                       f"{base[a]:.4g}{loaded}")
            out.append(self._detection(run, None, metric, w.first_step[a], w.last_step[b], w.mid_step[k],
                                       float(-rel[k]), Severity.WARNING, message, evidence,
                                       known=w.last_step[a + self.persist_blocks - 1]))
        return out

    def _vs_reference(self, run: RunData, reference: RunData, metric: str, x: pd.Series) -> list:
        y = finite(reference, metric)
        if len(y) < 2:
            return []
        w, complete, width = self._blocks(run, metric, x)
        v = window_summaries(y.index.to_numpy(), y.to_numpy(), width, medians_only=True)
        common, iw, iv = np.intersect1d(w.ids, v.ids, return_indices=True)
        if common.size == 0:
            return []
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = w.median[iw] / v.median[iv] - 1.0
        flag = complete[iw] & (rel < -self.drop_fraction)
        out = []
        for a, b in signed_runs(flag, rel, common, self.persist_blocks):
            k = a + int(np.argmin(rel[a:b + 1]))
            evidence = {"value": float(w.median[iw][k]), "reference_value": float(v.median[iv][k]),
                        "delta": float(rel[k]), "band": -self.drop_fraction, "blocks": int(b - a + 1)}
            load, loaded = self._host_load(run, w.first_step[iw][a], w.last_step[iw][b])
            evidence.update(load)
            message = (f"{metric} {w.median[iw][k]:.4g}, {-rel[k]:.0%} below the reference's "
                       f"{v.median[iv][k]:.4g} (same hardware? then the run is slower){loaded}")
            out.append(self._detection(run, reference, f"{metric}/vs_reference", w.first_step[iw][a], w.last_step[iw][b],
                                       w.mid_step[iw][k], float(-rel[k]), Severity.INFO, message, evidence,
                                       known=w.last_step[iw][a + self.persist_blocks - 1]))
        return out

    def _host_load(self, run: RunData, start: float, end: float) -> tuple[dict, str]:
        """The highest load per CPU logged in steps start..end, as evidence, and the clause the
        message ends with when it reached `busy_host_load` (empty otherwise or when none is logged)."""
        load = finite(run, SYS_LOAD_PER_CPU)
        window = load[(load.index >= start) & (load.index <= end)]
        if window.empty:
            return {}, ""
        peak = float(window.max())
        if peak < self.busy_host_load:
            return {"host_load_per_cpu": peak}, ""
        return {"host_load_per_cpu": peak}, (f"; the host was loaded (load average {peak:.2g} per CPU in these "
                                             f"steps), so the machine may be to blame rather than the run")


def _times(run: RunData) -> pd.Series:
    """Logged step times; a step cannot take no time, so such values are not timings."""
    times = finite(run, PERF_STEP_TIME_S)
    return times[times.to_numpy() > 0]
