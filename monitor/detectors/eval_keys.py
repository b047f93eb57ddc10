"""Reading the eval keys of a run: held-out sets and downstream metrics with their error bars.

Keys follow monitor.schema: `eval/heldout/<set>/<loss|bpb|stderr|n>` and
`eval/downstream/<task>/<metric>[/stderr|/n]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor.schema import DOWNSTREAM_PREFIX, HELDOUT_PREFIX, RunData

from .rundata import finite

# Metric names whose smaller values are better (bits per byte, perplexity, losses) and those whose
# larger values are better (accuracies, exact match, F1, probability of the answer). Anything else
# (bias scores such as CrowS-Pairs' likelihood_difference or pct_stereotype) has no better
# direction, so it is never called a regression.
LOWER_IS_BETTER = re.compile(r"(^|[_/.\-])(bpb|bits|ppl|perplexity|loss|nll|ce|error|wer)([_/.\-]|$)")
HIGHER_IS_BETTER = re.compile(
    r"(^|[_/.\-])(acc|accuracy|acc_norm|len_norm|exact_match|em|f1|mc1|mc2|soft|soft_log|bleu|rouge\w*|"
    r"pass@\d+|correct|score)([_/.\-]|$)")


def heldout_sets(columns) -> dict[str, dict[str, str]]:
    """{set: {stat: key}} for every `eval/heldout/<set>/<stat>` column."""
    out: dict[str, dict[str, str]] = {}
    for key in columns:
        if not key.startswith(HELDOUT_PREFIX):
            continue
        parts = key[len(HELDOUT_PREFIX):].split("/")
        if len(parts) == 2:
            out.setdefault(parts[0], {})[parts[1]] = key
    return out


def unshared_heldout(run: RunData, reference: RunData) -> str | None:
    """Why no held-out set pairs although both runs log some: their sets share no name (the
    aligned reference names the ones alignment left out). None when a set is shared or a side
    logs none."""
    ours = heldout_sets(run.scalars.columns)
    alignment = reference.info.alignment
    theirs = heldout_sets([*reference.scalars.columns, *(alignment.reference_only if alignment else ())])
    if not ours or not theirs or set(ours) & set(theirs):
        return None
    return (f"the run's held-out sets ({', '.join(sorted(ours))}) and the reference's ({', '.join(sorted(theirs))}) "
            f"share no name, so none is paired; a profile rule can name them alike (docs/importing.md)")


@dataclass(frozen=True)
class DownstreamMetric:
    """One downstream number a run logs, with the keys of its error bars when it has them."""

    task: str
    metric: str
    key: str
    stderr_key: str | None
    n_key: str | None

    @property
    def lower_is_better(self) -> bool:
        return lower_is_better(self.metric)

    @property
    def oriented(self) -> bool:
        """Whether the metric has a better direction at all."""
        name = self.metric.lower()
        return bool(LOWER_IS_BETTER.search(name) or HIGHER_IS_BETTER.search(name))


def lower_is_better(metric: str) -> bool:
    """Whether a smaller value of this downstream metric (bpb, perplexity, loss...) is better."""
    return bool(LOWER_IS_BETTER.search(metric.lower()))


def downstream_metrics(columns) -> list[DownstreamMetric]:
    cols = set(columns)
    out = []
    for key in sorted(cols):
        if not key.startswith(DOWNSTREAM_PREFIX):
            continue
        parts = key[len(DOWNSTREAM_PREFIX):].split("/")
        if len(parts) < 2 or parts[-1] in ("stderr", "n") and len(parts) >= 3:
            continue
        se, n = f"{key}/stderr", f"{key}/n"
        metric = DownstreamMetric(parts[0], "/".join(parts[1:]), key, se if se in cols else None,
                                  n if n in cols else None)
        if metric.oriented:
            out.append(metric)
    return out


def stderr_of(run: RunData, m: DownstreamMetric, steps: np.ndarray) -> np.ndarray:
    """Standard error of a downstream metric at `steps`: logged, else binomial from n, else NaN.

    The binomial error sqrt(p (1 - p) / n) applies only to proportions (values within [0, 1]).
    """
    vals = _at(run, m.key, steps)
    if m.stderr_key is not None:
        se = _at(run, m.stderr_key, steps)
        if np.isfinite(se).any():
            return se
    if m.n_key is not None:
        n = _at(run, m.n_key, steps)
        prop = (vals >= 0) & (vals <= 1) & (n > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(prop, np.sqrt(np.clip(vals * (1 - vals), 0, None) / n), np.nan)
    return np.full(len(steps), np.nan)


def _at(run: RunData, key: str, steps: np.ndarray) -> np.ndarray:
    if key not in run.scalars.columns:
        return np.full(len(steps), np.nan)
    col = run.scalars[key]
    if isinstance(col.dtype, pd.SparseDtype):
        col = run.series(key)  # the logged values alone: reindexing them is the same, and cheap
    return col.reindex(steps).to_numpy(dtype=float)


def matching_steps(run: RunData, reference: RunData, key: str) -> np.ndarray:
    """Steps at which both runs logged a finite value of `key` (after alignment, the checkpoints
    the two share)."""
    a, b = finite(run, key), finite(reference, key)
    return a.index.intersection(b.index).to_numpy()


def oriented_difference(run: RunData, reference: RunData, m: DownstreamMetric,
                        steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(run - reference) turned so that positive means the run is better, its standard error
    (NaN where unknown), and the reference's values."""
    r, f = _at(run, m.key, steps), _at(reference, m.key, steps)
    sign = -1.0 if m.lower_is_better else 1.0
    se = np.sqrt(stderr_of(run, m, steps) ** 2 + stderr_of(reference, m, steps) ** 2)
    return sign * (r - f), se, f


def downstream_aggregate(run: RunData, reference: RunData, steps: np.ndarray) -> pd.DataFrame:
    """Per step, the mean relative advantage of the run over the reference across tasks.

    Columns: step, tasks, mean_rel (positive = run better), se (its standard error: from the
    logged error bars where every task has them, else from the spread across tasks), logged
    (whether the error bars gave it), z (mean_rel / se: normal where logged, else a one-sample t
    statistic on one value per task).
    """
    metrics = downstream_metrics(set(run.scalars.columns) & set(reference.scalars.columns))
    if not metrics or len(steps) == 0:
        return pd.DataFrame(columns=["step", "tasks", "mean_rel", "se", "logged", "z"])
    rel, rel_se, task_of = [], [], []
    for m in metrics:
        d, se, f = oriented_difference(run, reference, m, steps)
        scale = np.where(np.abs(f) > 0, np.abs(f), np.nan)
        rel.append(d / scale)
        rel_se.append(se / scale)
        task_of.append(m.task)
    rel_arr, se_arr = np.vstack(rel), np.vstack(rel_se)
    # One vote per task: the metrics of one task (accuracy, normalised accuracy, bpb...) move
    # together and would otherwise count as independent evidence.
    tasks = sorted(set(task_of))
    idx = np.array([tasks.index(t) for t in task_of])
    per_task = np.vstack([np.nanmean(rel_arr[idx == i], axis=0) for i in range(len(tasks))])
    per_task_se = np.vstack([np.sqrt(np.nanmean(se_arr[idx == i] ** 2, axis=0)) for i in range(len(tasks))])
    n = np.sum(np.isfinite(per_task), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(np.where(np.isfinite(per_task), per_task, np.nan), axis=0)
        have_se = np.all(np.isfinite(per_task_se) | ~np.isfinite(per_task), axis=0)
        se_logged = np.sqrt(np.nansum(per_task_se ** 2, axis=0)) / np.maximum(n, 1)
        spread = np.nanstd(per_task, axis=0, ddof=1) / np.sqrt(np.maximum(n, 1))
        se = np.where(have_se, se_logged, spread)
        z = mean / se
    return pd.DataFrame({"step": steps, "tasks": n, "mean_rel": mean, "se": se, "logged": have_se, "z": z})
