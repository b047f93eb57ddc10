"""Min/max/mean/last per bucket of steps, at several widths, for reads under a point budget.

A chart of a 1.41M-step series at 2,000 points must not read 1.41M rows. The writer keeps, for each
series and each width below, one row per bucket of `width` consecutive steps; the reader picks the
finest width whose buckets fit the budget. Min and max keep the step at which they occurred, so a
spike survives downsampling as a real (step, value) point.
"""

from __future__ import annotations

import numpy as np

# Each level is 8x coarser than the one before: 64 steps to 32,768. With min and max per bucket a
# level serves ranges of up to width * points / 2 steps; 32,768 covers 30M+ steps at 2,000 points.
LEVEL_WIDTHS = (64, 512, 4096, 32768)

ROLLUP_COLUMNS = (
    "key_id", "bucket", "n", "nonfinite", "total",
    "min_step", "min_value", "max_step", "max_value", "last_step", "last_value",
)


def aggregate(key_ids: np.ndarray, steps: np.ndarray, values: np.ndarray, width: int) -> dict[str, np.ndarray]:
    """Bucket statistics (ROLLUP_COLUMNS, as parallel arrays) of rows sorted by (key_id, step), one
    row per step and key (the latest attempt). Buckets without a finite value have min/max steps of
    -1 and NaN values.

    Non-finite values count in `n` and `nonfinite` but not in min, max or total: a NaN must not
    erase the shape of the curve, and the nonfinite detector reports it on its own.
    """
    if len(steps) == 0:
        return {c: np.empty(0) for c in ROLLUP_COLUMNS}
    buckets = steps // width
    starts, ends = _bucket_runs(key_ids, buckets)
    finite = np.isfinite(values)
    nonfinite = np.add.reduceat((~finite).astype(np.int64), starts)
    return _bucket_stats(key_ids, buckets, starts, ends, n=ends - starts, nonfinite=nonfinite,
                         total=np.add.reduceat(np.where(finite, values, 0.0), starts),
                         low=np.where(finite, values, np.inf), high=np.where(finite, values, -np.inf),
                         min_steps=steps, max_steps=steps, last_steps=steps, last_values=values)


def aggregate_levels(key_ids: np.ndarray, steps: np.ndarray, values: np.ndarray) -> list[dict[str, np.ndarray]]:
    """`aggregate` at each of LEVEL_WIDTHS, in order. Each coarser level is combined from the
    buckets of the one before (each width divides the next), so a dense series' rows are walked
    once, not once a level; the statistics are the same, totals up to rounding."""
    levels = [aggregate(key_ids, steps, values, LEVEL_WIDTHS[0])]
    for fine_width, width in zip(LEVEL_WIDTHS, LEVEL_WIDTHS[1:]):
        levels.append(_coarser(levels[-1], fine_width, width))
    return levels


def _coarser(fine: dict[str, np.ndarray], fine_width: int, width: int) -> dict[str, np.ndarray]:
    key_ids = fine["key_id"]
    if len(key_ids) == 0:
        return fine
    buckets = fine["bucket"] * fine_width // width
    starts, ends = _bucket_runs(key_ids, buckets)
    # A fine bucket without a finite value has NaN statistics: it takes part in none of them.
    fine_finite = fine["nonfinite"] < fine["n"]
    return _bucket_stats(key_ids, buckets, starts, ends, n=np.add.reduceat(fine["n"], starts),
                         nonfinite=np.add.reduceat(fine["nonfinite"], starts),
                         total=np.add.reduceat(np.where(fine_finite, fine["total"], 0.0), starts),
                         low=np.where(fine_finite, fine["min_value"], np.inf),
                         high=np.where(fine_finite, fine["max_value"], -np.inf),
                         min_steps=fine["min_step"], max_steps=fine["max_step"],
                         last_steps=fine["last_step"], last_values=fine["last_value"])


def _bucket_runs(key_ids: np.ndarray, buckets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each (key, bucket) run of the sorted rows starts and ends."""
    change = np.empty(len(key_ids), dtype=bool)
    change[0] = True
    change[1:] = (key_ids[1:] != key_ids[:-1]) | (buckets[1:] != buckets[:-1])
    starts = np.flatnonzero(change)
    return starts, np.append(starts[1:], len(key_ids))


def _bucket_stats(key_ids, buckets, starts, ends, *, n, nonfinite, total, low, high, min_steps, max_steps,
                  last_steps, last_values) -> dict[str, np.ndarray]:
    """A level's columns from its rows (raw rows, or a finer level's buckets): low and high are
    the rows' finite minima and maxima (+-inf where none); min_steps and max_steps where each
    row's extreme lies, the first row attaining it winning (rows are in step order)."""
    has_finite = nonfinite < n
    min_value = np.minimum.reduceat(low, starts)
    max_value = np.maximum.reduceat(high, starts)
    # First position in each bucket that attains its min (max): the rest of the bucket gets len().
    position, size, rows = np.arange(len(key_ids)), ends - starts, len(key_ids)
    min_at = np.minimum.reduceat(np.where(low == np.repeat(min_value, size), position, rows), starts)
    max_at = np.minimum.reduceat(np.where(high == np.repeat(max_value, size), position, rows), starts)
    return {
            "key_id": key_ids[starts],
            "bucket": buckets[starts],
            "n": n,
            "nonfinite": nonfinite,
            "total": np.where(has_finite, total, np.nan),
            "min_step": np.where(has_finite, min_steps[np.minimum(min_at, rows - 1)], -1),
            "min_value": np.where(has_finite, min_value, np.nan),
            "max_step": np.where(has_finite, max_steps[np.minimum(max_at, rows - 1)], -1),
            "max_value": np.where(has_finite, max_value, np.nan),
            "last_step": last_steps[ends - 1],
            "last_value": last_values[ends - 1],
    }


def choose_level(span_steps: int, rows_per_step: float, max_points: int, oversample: int,
                 raw_factor: int) -> int | None:
    """The level to read for a range, or None to read raw rows.

    Raw rows are read while they number at most `raw_factor * max_points`; beyond that, the finest
    level giving at most `oversample * max_points` points (two per bucket). The reader then thins
    whatever it read to `max_points` in memory. Reading raw rows well past the budget matters
    between the raw limit and the first level: a 10k-step range at 64 steps a bucket would give
    only ~300 points, far fewer than a chart can show.
    """
    if span_steps * rows_per_step <= raw_factor * max_points:
        return None
    for level, width in enumerate(LEVEL_WIDTHS):
        if 2 * (span_steps / width + 1) <= oversample * max_points:
            return level
    return len(LEVEL_WIDTHS) - 1
