"""NaN/Inf and an exploding grad norm."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.detectors import role_of
from monitor.detectors.nonfinite import NonFiniteDetector
from monitor.schema import PERF_MFU, TRAIN_GRAD_NORM, TRAIN_LOSS, Severity

from .synth import full_run, grad_norm, run


def with_nan(r, key, steps):
    r.scalars.loc[steps, key] = np.nan
    nf = pd.DataFrame({"key": key, "step": np.asarray(steps, dtype="int64"), "value": np.nan})
    r.logged_nonfinite = pd.concat([r.logged_nonfinite, nf], ignore_index=True)
    return r


def test_fires_at_the_first_nan_loss():
    r = with_nan(full_run(), TRAIN_LOSS, [2000, 2001, 2002])
    (d,) = NonFiniteDetector().detect(r)
    assert (d.metric, d.start_step, d.end_step, d.severity) == (TRAIN_LOSS, 2000, 2002, Severity.CRITICAL)
    assert d.evidence["first_value"] == "nan" and d.evidence["last_finite_step"] == 1999


def test_inf_in_other_metric_is_a_warning_and_unlogged_cells_are_not_nan():
    r = full_run()
    r.scalars.loc[1500, PERF_MFU] = np.inf
    (d,) = NonFiniteDetector().detect(r)
    assert d.metric == PERF_MFU and d.severity == Severity.WARNING and d.evidence["first_value"] == "inf"
    # held-out losses are NaN between checkpoints: not logged, not non-finite
    assert r.scalars["eval/heldout/c4/loss"].isna().sum() > 0


def test_silent_on_clean_run():
    assert NonFiniteDetector().detect(full_run()) == []


def test_exploding_grad_norm():
    steps = np.arange(2000)
    g = grad_norm(steps, 1)
    g[1500:1510] *= np.geomspace(5, 500, 10)
    g[800] *= 8  # one big spike that recovers: not explosion
    (d,) = NonFiniteDetector().detect(run("r", pd.DataFrame({TRAIN_GRAD_NORM: g}, index=steps)))
    assert d.metric == TRAIN_GRAD_NORM and d.start_step >= 1500 and d.end_step == 1509
    assert d.severity == Severity.CRITICAL and d.evidence["ratio"] > 100
    # Its incident is named for the grad norm, a NaN for the NaN.
    assert role_of(d).explanation == f"{TRAIN_GRAD_NORM} exploding"
    (nan,) = NonFiniteDetector().detect(with_nan(full_run(), TRAIN_LOSS, [100]))
    assert role_of(nan).explanation == "NaN or Inf in the run"


def test_an_exploding_grad_norm_fed_in_pieces_is_reported_once_not_again_as_its_history_drops():
    """Judged in pieces, the finding is told when it happens; as its trailing median's history
    leaves the tail its ratio would drift a little on each later piece, and that is not news."""
    from monitor.detectors.rundata import slice_rows

    steps = np.arange(1200)
    g = grad_norm(steps, 1)
    g[320:325] *= 20
    exploding = run("r", pd.DataFrame({TRAIN_GRAD_NORM: g}, index=steps))
    detector = NonFiniteDetector()
    for data, told in ((exploding, [(320, 324)]), (run("c", pd.DataFrame({TRAIN_GRAD_NORM: grad_norm(steps, 1)},
                                                                           index=steps)), [])):
        state, reported = detector.new_state(), []
        for lo in range(0, 1200, 20):
            state, found = detector.update(state, slice_rows(data, lo - 0.5, lo + 19))
            reported += [(d.start_step, d.end_step) for d in found]
        assert reported == told
