"""Grad-norm growth: a slow climb that stays up is one detection, and only blocks judged back under
the ratio are clean verdicts (what ends its incident), never the steps between two blocks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.detectors.grad_norm_growth import GradNormGrowth
from monitor.schema import TRAIN_GRAD_NORM, RunData, RunInfo

BLOCK = 100


def run_with(level: np.ndarray) -> RunData:
    rng = np.random.default_rng(0)
    steps = np.arange(len(level))
    values = level * (1 + 0.05 * rng.standard_normal(len(level)))
    return RunData(RunInfo(name="r"), pd.DataFrame({TRAIN_GRAD_NORM: values}, index=pd.Index(steps, name="step")))


def flat(n: int) -> np.ndarray:
    return np.full(n, 0.3)


def test_growth_that_stays_is_one_detection_and_has_no_clean_block_after_it():
    level = flat(2000)
    level[1000:] = 0.3 * np.clip(1 + (np.arange(1000) / 300.0), 1, 3)  # to 3x by step 1600, and it stays
    detector = GradNormGrowth(block_points=BLOCK)
    run = run_with(level)
    (found,) = detector.detect(run)
    assert found.start_step >= 1000
    assert not [c for c in detector.clean(run) if c.start_step > found.end_step]


def test_blocks_back_under_the_ratio_are_clean_verdicts():
    level = flat(3000)
    level[1000:1800] = 0.9  # 3x for 800 steps, then back to its level
    detector = GradNormGrowth(block_points=BLOCK)
    run = run_with(level)
    (found,) = detector.detect(run)
    after = [c for c in detector.clean(run) if c.start_step > found.end_step]
    assert len(after) >= 2 and all(c.evidence["ratio"] < detector.growth_ratio for c in after)


def test_a_flat_grad_norm_is_silent_and_clean_past_warmup():
    detector = GradNormGrowth(block_points=BLOCK)
    run = run_with(flat(2000))
    assert detector.detect(run) == []
    cleans = detector.clean(run)
    assert cleans and min(c.start_step for c in cleans) >= detector.warmup_blocks * BLOCK
