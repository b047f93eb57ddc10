"""Resume consistency: restored step vs data position, replayed steps, lost progress."""

from __future__ import annotations

import numpy as np
import pandas as pd

from monitor.detectors.resume import ResumeConsistency
from monitor.schema import DATA_CURSOR, TRAIN_LOSS, EventKind, Severity

from .synth import data_metrics, run, train_loss

BATCH = 32


def resumed_run(restored_step, position, offset=0, repeats=None, deterministic=True):
    steps = np.arange(1, 2001)
    frame = pd.DataFrame({TRAIN_LOSS: train_loss(steps, 1)}, index=steps)
    frame = frame.join(data_metrics(steps, BATCH, 10**9, offset=offset)[[DATA_CURSOR]])
    r = run("r", frame, global_batch_size=BATCH, config={"deterministic": deterministic})
    r.events = pd.DataFrame({"step": [restored_step], "kind": [EventKind.RESUME.value], "attempt": [2],
                             "payload": [{"restored_step": restored_step, "restored_data_position": position,
                                          "global_batch_size": BATCH}]})
    if repeats is not None:
        r.repeats = repeats
    return r


def test_off_by_one_resume_fires_at_the_resume():
    # model restored at step N+1 = 1201 while the data loader is at batch N = 1200
    found = ResumeConsistency().detect(resumed_run(1201, 1200 * BATCH))
    (d,) = found
    assert (d.start_step, d.severity, d.evidence["delta"]) == (1201, Severity.CRITICAL, -1.0)
    assert "step 1201" in d.message and "batch 1200" in d.message


def test_consistent_resume_is_silent_for_either_cursor_convention():
    assert ResumeConsistency().detect(resumed_run(1200, 1200 * BATCH)) == []
    assert ResumeConsistency().detect(resumed_run(1200, 1201 * BATCH, offset=1)) == []


def replayed(values_a, values_b, steps):
    return pd.DataFrame({"key": TRAIN_LOSS, "step": np.r_[steps, steps].astype("int64"),
                         "attempt": np.r_[np.ones(steps.size), 2 * np.ones(steps.size)].astype("int64"),
                         "value": np.r_[values_a, values_b]})


def test_replayed_steps_must_agree_when_deterministic():
    steps = np.arange(1151, 1201)
    same = train_loss(steps, 3)
    assert ResumeConsistency().detect(resumed_run(1150, 1150 * BATCH, repeats=replayed(same, same, steps))) == []
    shifted = np.roll(same, -1)  # the replay trains on the neighbouring batches
    (d,) = ResumeConsistency().detect(resumed_run(1150, 1150 * BATCH, repeats=replayed(same, shifted, steps)))
    assert d.metric == TRAIN_LOSS and d.severity == Severity.WARNING
    assert d.evidence["steps_differing"] == 50 and d.evidence["max_delta"] > 0.01
    (d,) = ResumeConsistency().detect(resumed_run(1150, 1150 * BATCH, repeats=replayed(same, shifted, steps),
                                                  deterministic=False))
    assert d.severity == Severity.INFO


def test_gaps_are_lost_progress():
    r = resumed_run(1200, 1200 * BATCH)
    r.scalars = r.scalars.drop(index=range(500, 600))
    (d,) = ResumeConsistency().detect(r)
    assert (d.start_step, d.end_step, d.evidence["missing_steps"]) == (500, 599, 100)
    assert d.severity == Severity.INFO and "100 steps of progress are missing" in d.message
    r.scalars = r.scalars.drop(index=[1500])
    assert "1 step of progress is missing" in ResumeConsistency().detect(r)[-1].message


def test_each_rule_names_its_incident_for_what_it_shows():
    # A gap needs no resume (a crash, a sampled W&B export): its incident is never named after one,
    # and any more specific finding of the data story names the incident instead.
    detector = ResumeConsistency()
    gap = resumed_run(1200, 1200 * BATCH)
    gap.scalars = gap.scalars.drop(index=range(500, 600))
    (d,) = detector.detect(gap)
    assert detector.role(d).explanation == "steps missing from the record" and detector.role(d).specificity == 0
    (d,) = detector.detect(resumed_run(1201, 1200 * BATCH))
    assert detector.role(d).explanation == "the resume did not restore where the run stopped"
    steps = np.arange(1151, 1201)
    same = train_loss(steps, 3)
    (d,) = detector.detect(resumed_run(1150, 1150 * BATCH, repeats=replayed(same, np.roll(same, -1), steps)))
    assert detector.role(d).explanation == "a replay after a restart logged another loss"
