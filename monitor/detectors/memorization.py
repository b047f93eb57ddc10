"""Memorization: train loss falls below the reference while held-out loss stays tied.

A data loader that repeats data (double sharding that resamples the corpus, a wrong epoch
boundary) lowers the train loss, because the model has seen those records before, but not the
held-out loss, and downstream evals do not improve. Judged at every checkpoint where both runs
have held-out losses (after alignment):

* train: the median of (run - reference) train loss over the logged steps up to the checkpoint
  (the last `window_points` of them, and none older than `window_checkpoints` held-out intervals,
  so that the train loss describes the same stretch of training as the held-out loss it is set
  against) is below -max(`min_effect`, z * its standard error);
* held-out did not follow: the mean held-out difference over the sets is above
  `max_heldout_share` times the train difference (held-out recovered at most that share of the
  train gain), and the gap between the two is itself more than z standard errors;
* downstream evals, where both runs have them, are not significantly better.

`persist_checkpoints` consecutive checkpoints make a detection.

Inside each batch, where the run logs it (our trainer does): the loss of records read before
against first reads on the same parameters (monitor/detectors/reread.py). A block of
`window_points` steps whose median gap exceeds max(`min_effect`, z standard errors) is a verdict;
`persist_checkpoints` consecutive blocks make a detection (metric `train/reread_loss_gap`). No
reference and no seed enters it.

Within one run (no reference needed), the gap held-out minus train loss at each checkpoint is
compared with its own trend (Theil-Sen on log step, so a widening late segment does not bend
the line it is judged by); a gap above the trend by more than max(`min_effect`, z sigma of the
residuals) at `persist_checkpoints` consecutive checkpoints is the same signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import warnings

import numpy as np
import pandas as pd
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import TheilSenRegressor

from monitor.schema import (
    DATA_SEEN_2PLUS_FRACTION,
    HELDOUT_PREFIX,
    TRAIN_LOSS,
    TRAIN_REREAD_LOSS_GAP,
    RunData,
    Severity,
)

from . import reread
from .base import Detector, reconcile
from .rundata import concat_rows, finite, restrict_columns, slice_rows, trim_rows
from .eval_keys import downstream_aggregate, heldout_sets
from .stats import MAD_TO_SIGMA, MEDIAN_SE_FACTOR, cadence, effective_n, row_medians, true_runs

SUSPECT = ("the signature of repeated training data (data-loader sharding that resamples the "
           "corpus, a wrong epoch boundary)")


@dataclass
class Memorization(Detector):
    name: ClassVar[str] = "memorization"

    metric: str = TRAIN_LOSS
    """The train metric compared with the reference."""
    window_points: int = 100
    """Logged steps of train loss per checkpoint, at most."""
    window_checkpoints: int = 2
    """A median over a window lags its end by half the window: on a run whose held-out evals are a
    few dozen steps apart, 100 steps of train loss would describe training long before the
    held-out loss it is compared with."""
    min_effect: float = 0.05
    """The reference-divergence floor: seeds of one recipe never differ by more than 0.04 nats in
    train loss (the 13 repeats), so a smaller train gain is not evidence."""
    z_threshold: float = 3.0
    """Standard errors an effect must exceed."""
    max_heldout_share: float = 0.5
    """In the OLMo 3 7B reproduction, train loss fell 0.25 below the reference and held-out C4
    moved by 0.004: a share of 0.02. A real improvement moves held-out by most of the train
    gain; half is the boundary."""
    persist_checkpoints: int = 2
    """Consecutive flagged checkpoints that make a detection."""
    critical_ratio: float = 3.0
    """An effect this many times min_effect is CRITICAL."""
    within_run: bool = True
    """Also judge the held-out minus train gap against its own trend (no reference needed)."""
    skip_checkpoints: int = 3
    """Checkpoints at the start of training, where train and held-out fall too fast for a trend,
    are left out of the within-run fit; at least this many checkpoints are needed."""
    min_trend_checkpoints: int = 8
    """Smallest base of a trend fit."""

    def columns(self, run: RunData) -> list[str]:
        return [c for c in run.scalars.columns
                if c == self.metric or c.startswith(HELDOUT_PREFIX) or c.startswith("eval/downstream/")
                or c == DATA_SEEN_2PLUS_FRACTION or c in reread.COLUMNS]

    def lookback(self, step_cadence: float) -> float:
        return 2 * self.window_points * step_cadence

    def detect(self, run: RunData, reference: RunData | None = None) -> list:
        found = self._judge(run, reference, self.table(run, reference))
        if len(run.scalars):
            found += self._reread(run, self.reread_blocks(run))
        return sorted(found, key=lambda d: (d.start_step, d.metric))

    def update(self, state, new_rows, reference=None):
        """Checkpoint summaries are computed once, when a checkpoint arrives, and kept in the
        state; only the train-loss rows the next checkpoint's window needs stay in the tail."""
        cols = self.columns(new_rows)
        fresh = restrict_columns(new_rows, cols)
        if fresh.scalars.empty:
            return state, []
        combined = fresh if state.tail is None else concat_rows(state.tail, fresh)
        hi = int(combined.scalars.index[-1])
        done = state.extra.get("last_checkpoint", -np.inf)
        held_steps = _heldout_steps(combined)
        new_ckpts = held_steps[held_steps > done]
        emitted = []
        if new_ckpts.size:
            back = self.lookback(cadence(combined.scalars.index.to_numpy()))
            ref = None
            if reference is not None:
                ref = slice_rows(reference, float(new_ckpts[0]) - back, float(new_ckpts[-1]))
            rows = self.table(combined, ref, steps=new_ckpts, previous=done)
            table = pd.concat([_table_from_json(state.extra.get("table", [])), rows], ignore_index=True)
            state.extra["table"] = _json_rows(table)
            state.extra["last_checkpoint"] = int(new_ckpts[-1])
            state.extra["reference"] = reference.name if reference is not None else None
            found = self._judge(combined, reference, table, state.extra.setdefault("trend_fits", {}))
            emitted = reconcile(state, found, 0.0)
        emitted += self._update_reread(state, combined)
        back = self.lookback(cadence(combined.scalars.index.to_numpy()))
        kept = [self.metric, DATA_SEEN_2PLUS_FRACTION, *reread.COLUMNS]
        state.tail = trim_rows(restrict_columns(combined, kept), hi - back)
        state.last_step = hi
        return state, emitted

    # --- inside each batch ------------------------------------------------------------------------------
    def reread_blocks(self, run: RunData, width: float | None = None) -> pd.DataFrame:
        """The in-batch comparison block by block (reread.blocks), as this detector judges it:
        blocks of `width` steps (default: `window_points` logged steps) with at least half that
        many measured steps, leaving out the block the run's last row is in (it may still grow)."""
        if width is None:
            width = self.window_points * cadence(run.scalars.index.to_numpy())
        still_growing = float(np.floor(run.scalars.index[-1] / width) * width)
        return reread.blocks(run, width, max(5, self.window_points // 2), before=still_growing)

    def _update_reread(self, state, combined: RunData) -> list:
        """Blocks are summarised once, when a row past them arrives, and kept in the state; the
        width is fixed by the first rows seen, so a verdict never depends on how rows arrived."""
        if not any(c in combined.scalars.columns for c in reread.COLUMNS):
            return []
        width = state.extra.setdefault("reread_width", self.window_points * cadence(combined.scalars.index.to_numpy()))
        done = state.extra.get("reread_done", -1)
        fresh = self.reread_blocks(combined, width)
        fresh = fresh[fresh["block"] > done]
        if fresh.empty:
            return []
        rows = state.extra.get("reread_blocks", []) + fresh.to_numpy().tolist()
        state.extra["reread_blocks"] = rows
        state.extra["reread_done"] = int(fresh["block"].iloc[-1])
        return reconcile(state, self._reread(combined, pd.DataFrame(rows, columns=list(reread.BLOCK_FIELDS))), 0.0)

    def _reread(self, run: RunData, table: pd.DataFrame) -> list:
        if table.empty:
            return []
        gap, se = table["gap"].to_numpy(dtype=float), table["se"].to_numpy(dtype=float)
        band = np.fmax(self.min_effect, self.z_threshold * se)
        out = []
        for a, b in true_runs(gap > band):
            if b - a + 1 < self.persist_checkpoints:
                continue
            with np.errstate(divide="ignore"):
                z = np.where(se > 0, gap / se, np.inf)
            k = a + int(np.argmax(z[a:b + 1]))
            row = table.iloc[k]
            evidence = {"gap": float(gap[k]), "stderr": float(se[k]), "band": float(band[k]), "z": float(z[k]),
                        "reread_fraction": float(row["reread"]), "points": int(row["n"]), "n": int(b - a + 1)}
            message = (f"records read before score {gap[k]:.3f} nats lower than first reads in the same batches "
                       f"({z[k]:.1f} standard errors; {row['reread']:.0%} of a batch re-read): the model "
                       f"remembers what it sees again, {SUSPECT}")
            score = float(gap[k] / self.min_effect)
            severity = Severity.CRITICAL if score >= self.critical_ratio else Severity.WARNING
            out.append(self._detection(run, None, TRAIN_REREAD_LOSS_GAP, table["first"].iloc[a],
                                       table["last"].iloc[b], row["last"], score, severity, message, evidence))
        return out

    # --- per-checkpoint summaries -----------------------------------------------------------------------
    def table(self, run: RunData, reference: RunData | None, steps: np.ndarray | None = None,
              previous: float = -np.inf) -> pd.DataFrame:
        """One row per checkpoint with held-out losses: within-run held-out and train levels
        and, with a reference, the train / held-out differences, their errors and the downstream
        z. Columns are NaN where the data is missing. `previous` is the held-out step before
        `steps[0]` (-inf: none), which bounds the first checkpoint's train window."""
        own = self.heldout_at(run, None)
        if steps is None:
            steps = own["step"].to_numpy()
        own = own.set_index("step").reindex(steps)
        steps = np.asarray(steps)
        before = np.concatenate([[previous], steps[:-1]]).astype(float)
        # Where there is no earlier checkpoint, only window_points bounds the window.
        since = np.where(np.isfinite(before), steps - self.window_checkpoints * (steps - before), -np.inf)
        t = self.train_at(run, steps, since=since)
        table = pd.DataFrame({"step": steps, "heldout": own["heldout"].to_numpy(dtype=float),
                              "train": t["train"].to_numpy()})
        seen = finite(run, DATA_SEEN_2PLUS_FRACTION)
        table["seen_2plus"] = seen.reindex(steps, method="ffill").to_numpy() if len(seen) else np.nan
        cols = ["d_train", "d_train_se", "d_held", "d_held_se", "sets", "down_z"]
        if reference is None:
            for c in cols:
                table[c] = np.nan
            return table
        held = self.heldout_at(run, reference).set_index("step").reindex(steps)
        dt = self.train_at(run, steps, reference, since=since)
        table["d_train"] = dt["train"].to_numpy()
        table["d_train_se"] = dt["train_se"].to_numpy()
        table["d_held"] = held["heldout"].to_numpy(dtype=float)
        table["d_held_se"] = held["heldout_se"].to_numpy(dtype=float)
        table["sets"] = held["sets"].to_numpy(dtype=float)
        if _has_downstream(run, reference):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                down = downstream_aggregate(run, reference, steps)
            table["down_z"] = down.set_index("step")["z"].reindex(steps).to_numpy(dtype=float)
        else:
            table["down_z"] = np.nan
        return table

    def _judge(self, run: RunData, reference: RunData | None, table: pd.DataFrame,
               fits: dict | None = None) -> list:
        out = []
        if reference is not None and len(table):
            out.extend(self._versus_reference(run, reference, table))
        if self.within_run and len(table):
            out.extend(self._within_run(run, table, {} if fits is None else fits))
        return sorted(out, key=lambda d: (d.start_step, d.metric))

    def train_at(self, run: RunData, steps: np.ndarray, other: RunData | None = None,
                 since: np.ndarray | None = None) -> pd.DataFrame:
        """Per checkpoint: median of the train loss (or of run - other) over the window of logged
        steps ending there (at most window_points, all after `since` where given), its standard
        error and the points used."""
        x = finite(run, self.metric)
        if other is not None:
            y = finite(other, self.metric)
            common = x.index.intersection(y.index)
            x = x.loc[common] - y.loc[common]
        idx = x.index.to_numpy()
        vals = x.to_numpy(dtype=float)
        steps = np.asarray(steps)
        # The window of each checkpoint gathered into one row of a grid (NaN-padded where fewer
        # points precede it), so every checkpoint is summarised in one vectorised pass.
        hi = np.searchsorted(idx, steps, side="right")
        lo = np.zeros_like(hi) if since is None else np.searchsorted(idx, since, side="right")
        bounded = np.isfinite(since) if since is not None else np.zeros(steps.shape, bool)
        n = np.minimum(hi - lo, self.window_points)
        pos = hi[:, None] - self.window_points + np.arange(self.window_points)[None, :]
        inside = pos >= (hi - n)[:, None]
        grid = np.where(inside, vals[np.clip(pos, 0, None)] if vals.size else np.nan, np.nan)
        med = row_medians(grid)
        dev = grid - med[:, None]
        sigma = MAD_TO_SIGMA * row_medians(np.abs(dev))
        filled = np.nan_to_num(dev)
        power = np.sum(filled * filled, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = np.where(power > 0, np.sum(filled[:, 1:] * filled[:, :-1], axis=1) / power, 0.0)
            se = MEDIAN_SE_FACTOR * sigma / np.sqrt(effective_n(n, rho))
        # An unbounded window must be half full; a bounded one needs only enough points for a median.
        enough = (n >= 5) & (bounded | (n >= self.window_points // 2))
        return pd.DataFrame({"step": steps, "train": np.where(enough, med, np.nan),
                             "train_se": np.where(enough, se, np.nan), "n": n})

    def heldout_at(self, run: RunData, reference: RunData | None) -> pd.DataFrame:
        """Per checkpoint: mean over held-out sets of the loss (or run - reference) and its
        standard error (NaN where the sets log none)."""
        ours = heldout_sets(run.scalars.columns)
        theirs = heldout_sets(reference.scalars.columns) if reference is not None else ours
        keys = [(s, st) for s, st in ours.items() if "loss" in st and "loss" in theirs.get(s, {})]
        empty = pd.DataFrame({"step": pd.Series(dtype="int64"), "heldout": pd.Series(dtype=float),
                              "heldout_se": pd.Series(dtype=float), "sets": pd.Series(dtype="int64")})
        if not keys:
            return empty
        cols, ses = [], []
        for name, stats_ in keys:
            v = run.scalars[stats_["loss"]]
            se = run.scalars[stats_["stderr"]] if "stderr" in stats_ else pd.Series(np.nan, index=v.index)
            if reference is not None:
                other = theirs[name]
                v = v - reference.scalars[other["loss"]].reindex(v.index)
                ref_se = (reference.scalars[other["stderr"]].reindex(v.index) if "stderr" in other
                          else pd.Series(np.nan, index=v.index))
                se = np.sqrt(se ** 2 + ref_se ** 2)
            cols.append(v.rename(name))
            ses.append(se.rename(name))
        vals = pd.concat(cols, axis=1)
        errs = pd.concat(ses, axis=1)
        ok = np.isfinite(vals.to_numpy(dtype=float)).any(axis=1)
        if not ok.any():
            return empty
        vals, errs = vals[ok], errs[ok]
        v, e = vals.to_numpy(dtype=float), errs.to_numpy(dtype=float)
        n = np.isfinite(v).sum(axis=1)
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(v, axis=1)
            se = np.where(np.isfinite(e).any(axis=1), np.sqrt(np.nansum(e ** 2, axis=1)) / n, np.nan)
        return pd.DataFrame({"step": vals.index.to_numpy(), "heldout": mean, "heldout_se": se, "sets": n})

    # --- against the reference ---------------------------------------------------------------------------
    def _versus_reference(self, run: RunData, reference: RunData, table: pd.DataFrame) -> list:
        steps = table["step"].to_numpy()
        t, t_se = table["d_train"].to_numpy(dtype=float), table["d_train_se"].to_numpy(dtype=float)
        h, h_se = table["d_held"].to_numpy(dtype=float), table["d_held_se"].to_numpy(dtype=float)
        dz = table["down_z"].to_numpy(dtype=float)
        band = np.fmax(self.min_effect, self.z_threshold * np.nan_to_num(t_se, nan=np.inf))
        gap = h - t
        gap_se = np.sqrt(np.nan_to_num(t_se, nan=np.inf) ** 2 + np.nan_to_num(h_se, nan=0.0) ** 2)
        with np.errstate(invalid="ignore"):
            below = t < -band
            not_followed = (h > self.max_heldout_share * t) & (gap > self.z_threshold * gap_se)
            not_better = ~(dz > self.z_threshold)
        flag = below & not_followed & not_better
        out = []
        for a, b in true_runs(flag):
            if b - a + 1 < self.persist_checkpoints:
                continue
            k = a + int(np.argmax(gap[a:b + 1]))
            score = float(gap[k] / self.min_effect)
            evidence = {
                "train_delta": float(t[k]), "train_stderr": float(t_se[k]), "band": float(band[k]),
                "heldout_delta": float(h[k]), "heldout_stderr": float(h_se[k]),
                "heldout_sets": int(table["sets"].iloc[k]), "delta": float(gap[k]),
                "z": float(gap[k] / gap_se[k]) if gap_se[k] > 0 else float("inf"),
                "downstream_z": float(dz[k]), "n": int(b - a + 1),
            }
            repeated = table["seen_2plus"].iloc[k]
            extra = ""
            if np.isfinite(repeated):
                evidence["seen_2plus_fraction"] = float(repeated)
                extra = f"; {repeated:.0%} of the corpus has been seen twice or more"
            tie = (f"{h[k]:+.3f} ± {h_se[k]:.3f}" if np.isfinite(h_se[k]) else f"{h[k]:+.3f}")
            message = (f"train loss {abs(t[k]):.3f} below the reference while held-out loss moved {tie} "
                       f"and downstream evals are not better: {SUSPECT}{extra}")
            severity = Severity.CRITICAL if score >= self.critical_ratio else Severity.WARNING
            out.append(self._detection(run, reference, self.metric, steps[a], steps[b], steps[k], score,
                                       severity, message, evidence))
        return out

    # --- within the run -----------------------------------------------------------------------------------
    def _within_run(self, run: RunData, table: pd.DataFrame, fits: dict) -> list:
        steps = table["step"].to_numpy()
        gap = table["heldout"].to_numpy(dtype=float) - table["train"].to_numpy(dtype=float)
        ok = np.isfinite(gap) & (steps > 0)
        ok[: self.skip_checkpoints] = False
        if ok.sum() < self.min_trend_checkpoints:
            return []
        resid, sigma = self._trend_residuals(steps, gap, ok, fits)
        band = np.fmax(self.min_effect, self.z_threshold * sigma)
        with np.errstate(invalid="ignore"):
            flag = resid > band
        out = []
        for a, b in true_runs(flag):
            if b - a + 1 < self.persist_checkpoints:
                continue
            k = a + int(np.nanargmax(resid[a:b + 1]))
            evidence = {"delta": float(resid[k]), "band": float(band[k]), "gap": float(gap[k]),
                        "trend_gap": float(gap[k] - resid[k]), "sigma": float(sigma[k]),
                        "z": float(resid[k] / sigma[k]) if sigma[k] > 0 else float("inf"), "n": int(b - a + 1)}
            repeated = table["seen_2plus"].iloc[k]
            if np.isfinite(repeated):
                evidence["seen_2plus_fraction"] = float(repeated)
            message = (f"held-out minus train loss widened to {gap[k]:.3f}, {resid[k]:.3f} above its trend: "
                       f"train loss keeps falling where held-out loss does not, {SUSPECT}")
            score = float(resid[k] / self.min_effect)
            severity = Severity.CRITICAL if score >= self.critical_ratio else Severity.WARNING
            out.append(self._detection(run, None, "eval/heldout/gap", steps[a], steps[b], steps[k], score,
                                       severity, message, evidence))
        return out

    def _trend_residuals(self, steps: np.ndarray, gap: np.ndarray, ok: np.ndarray,
                         fits: dict) -> tuple[np.ndarray, np.ndarray]:
        """Residual of each checkpoint's gap from a trend fitted on earlier checkpoints only.

        Checkpoint i (counting usable ones) is judged by a Theil-Sen line through the first 2^k
        usable checkpoints, 2^k <= i < 2^(k+1): always at least the first half of its history,
        never itself or what follows, so a verdict never changes as the run goes on and a
        memorizing stretch cannot bend the line it is judged by. One fit per doubling keeps a
        run with thousands of checkpoints to a dozen fits, and `fits` keeps them (intercept,
        slope, residual sigma, keyed by the size and last step of the base) across updates.
        """
        idx = np.flatnonzero(ok)
        resid = np.full(steps.size, np.nan)
        sigma = np.full(steps.size, np.nan)
        x_all = np.log(np.maximum(steps, 1).astype(float)).reshape(-1, 1)
        k = int(np.ceil(np.log2(self.min_trend_checkpoints)))
        while (1 << k) < idx.size:
            base = idx[: 1 << k]
            judged = idx[1 << k: 1 << (k + 1)]
            tag = f"{1 << k}@{int(steps[base[-1]])}"
            if tag not in fits:
                # 2,000 random pairs instead of scikit-learn's 10,000: the slope is still known to
                # far below the noise of the gap, at a fifth of the cost on long runs.
                with warnings.catch_warnings():
                    # On degenerate gaps (all equal) the spatial median stops at its iteration
                    # cap; the line it has is still the right one.
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    fit = TheilSenRegressor(max_subpopulation=2000, random_state=0).fit(x_all[base], gap[base])
                r_base = gap[base] - fit.predict(x_all[base])
                scale = MAD_TO_SIGMA * float(np.median(np.abs(r_base - np.median(r_base))))
                fits[tag] = [float(fit.intercept_), float(fit.coef_[0]), scale]
            intercept, slope, scale = fits[tag]
            resid[judged] = gap[judged] - (intercept + slope * x_all[judged, 0])
            sigma[judged] = scale
            k += 1
        return resid, sigma


def _heldout_steps(run: RunData) -> np.ndarray:
    keys = [k for st in heldout_sets(run.scalars.columns).values() for name, k in st.items() if name == "loss"]
    if not keys:
        return np.array([], dtype=np.int64)
    logged = np.isfinite(run.scalars[keys].to_numpy(dtype=float)).any(axis=1)
    return run.scalars.index.to_numpy()[logged]


def _json_rows(table: pd.DataFrame) -> list[dict]:
    """Table rows as JSON values (NaN as null)."""
    return [{k: (None if v is None or v != v else (int(v) if k == "step" else float(v)))
             for k, v in row.items()} for row in table.to_dict("records")]


def _table_from_json(rows: list[dict]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows)
    for col in table.columns:
        table[col] = table[col].astype("int64") if col == "step" else pd.to_numeric(table[col]).astype(float)
    return table



def _has_downstream(run: RunData, reference: RunData) -> bool:
    shared = set(run.scalars.columns) & set(reference.scalars.columns)
    return any(c.startswith("eval/downstream/") for c in shared)
