"""Which steps of a run its aligned reference covers, and the words for the rest: a reference that
stops before the run, a run that ends first (no word), a reference logged more seldom, and a pair
logged at no common step, on the step axis and on tokens."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.detectors.overlap import overlap
from monitor.judging.align import align_pair
from monitor.schema import TRAIN_LOSS

from .synth import run, train_loss


def logged(name: str, first: int, last: int, every: int = 1, **info):
    steps = np.arange(first, last + 1, every)
    return run(name, pd.DataFrame({TRAIN_LOSS: train_loss(steps, seed=1)}, index=steps), **info)


def compared(mine, theirs):
    return overlap(mine, align_pair(mine, theirs)[1], TRAIN_LOSS)


def test_a_reference_that_stops_first_is_compared_up_to_its_last_step_and_says_so():
    o = compared(logged("run", 1, 3000), logged("reference", 1, 900))
    assert (o.compared, o.before, o.after) == ((1, 900), None, (901, 3000))
    assert o.clause() == "compared on steps 1–900 of the run's 3,000: the reference stops at step 900"
    assert o.not_compared(min_steps=100) == "on steps 901–3,000: the reference stops at step 900"
    # A stretch shorter than the caller's unit of judgement is not worth a "not judged" line.
    assert o.not_compared(min_steps=2101) == ""


def test_a_reference_that_starts_later_is_said_too():
    o = compared(logged("run", 1, 3000), logged("reference", 1001, 3000))
    assert o.clause() == "compared on steps 1,001–3,000 of the run's 3,000: the reference starts at step 1,001"
    assert o.not_compared() == "on steps 1–1,000: the reference starts at step 1,001"


def test_a_run_that_ends_first_is_still_going_and_needs_no_word():
    o = compared(logged("run", 1, 900), logged("reference", 1, 3000))
    assert o.compared == (1, 900) and o.clause() == "" and o.not_compared() == ""


def test_a_reference_logged_more_seldom_reaches_the_run_up_to_where_its_next_value_falls():
    # Its last value at step 9,990 of a run that ends at 10,000: it did not stop early.
    o = compared(logged("run", 1, 10_000), logged("reference", 10, 9_990, every=10))
    assert o.compared == (10, 9_990) and o.clause() == ""


def test_no_common_step_is_said_with_the_steps_of_each_side():
    o = compared(logged("run", 1000, 3000), logged("reference", 1, 900))
    assert o.compared is None and o.clause() == "" and o.not_compared() == ""
    assert o.no_common_step() == ("the runs logged train/loss at no common step: the run at steps 1,000–3,000, "
                                  "the reference at steps 1–900")


def test_on_tokens_the_reference_is_named_by_its_own_steps_and_the_runs():
    # Twice the batch: the reference's step k is the run's step 2k.
    theirs = logged("reference", 1, 450, tokens_per_step=2000)
    o = compared(logged("run", 1, 3000, tokens_per_step=1000), theirs)
    assert o.axis == "tokens"
    assert o.clause() == ("compared on steps 2–900 of the run's 3,000 (paired by tokens): the reference stops at "
                          "its step 450 (the run's step 900 by tokens)")
    o = compared(logged("run", 1000, 3000, tokens_per_step=1000), theirs)
    assert o.no_common_step() == ("the runs logged train/loss at no common number of tokens: the run at steps "
                                  "1,000–3,000, the reference at steps 1–450 (the run's steps 2–900 by tokens)")


def test_a_reference_that_never_logged_the_metric_has_no_overlap():
    other = run("reference", pd.DataFrame({"train/grad_norm": np.ones(100)}, index=np.arange(1, 101)))
    assert compared(logged("run", 1, 100), other) is None
