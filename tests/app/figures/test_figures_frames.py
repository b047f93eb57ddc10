"""The pure frame helpers: key parsing, the train–held-out gap, the delta against the reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app import figures
from monitor.detectors.reference_divergence import ReferenceDivergence
from monitor.schema import TRAIN_LOSS, RunData, RunInfo, downstream_key, heldout_key


def series(steps, values) -> pd.DataFrame:
    return pd.DataFrame({"step": np.asarray(steps, dtype="int64"), "value": np.asarray(values, dtype=float)})


def test_series_frame_from_long_frames_and_run_data():
    long = pd.DataFrame({"run": ["a", "a", "b"], "key": [TRAIN_LOSS] * 3, "step": [2, 1, 1], "value": [2.0, 1.0, 9.0]})
    out = figures.series_frame(long, TRAIN_LOSS, run="a")
    assert out["step"].tolist() == [1, 2] and out["value"].tolist() == [1.0, 2.0]
    scalars = pd.DataFrame({TRAIN_LOSS: [3.0, np.nan, 2.0]}, index=pd.Index([0, 1, 2], name="step"))
    data = RunData(info=RunInfo(name="r"), scalars=scalars)
    assert figures.series_frame(data.series(TRAIN_LOSS))["step"].tolist() == [0, 2]
    assert figures.long_frame(data)["step"].tolist() == [0, 2]


def test_with_x_maps_steps_to_tokens():
    out = figures.with_x(series([0, 10], [1, 2]), lambda s: s * 4096.0)
    assert out["x"].tolist() == [0.0, 40960.0]


def test_heldout_and_downstream_frames_parse_keys():
    long = pd.DataFrame({
        "key": [heldout_key("c4_en", "loss"), heldout_key("c4_en", "stderr"), heldout_key("c4_en", "n"),
                downstream_key("arc_easy", "acc"), downstream_key("arc_easy", "acc", "stderr"),
                downstream_key("arc_easy", "acc", "n"), TRAIN_LOSS],
        "step": [100] * 7, "value": [3.0, 0.01, 500, 0.6, 0.02, 1000, 2.9],
    })
    held = figures.heldout_frame(long)
    assert held.to_dict("records") == [{"set": "c4_en", "step": 100, "loss": 3.0, "stderr": 0.01}]
    down = figures.downstream_frame(long)
    assert down.to_dict("records") == [{"task": "arc_easy/acc", "step": 100, "value": 0.6, "stderr": 0.02}]


def test_train_heldout_gap_takes_the_train_points_nearest_each_checkpoint():
    train = series([0, 100, 200], [4.0, 3.0, 2.0])
    held = pd.DataFrame({"set": ["c4", "c4", "c4"], "step": [50, 200, 300], "loss": [3.6, 2.2, 2.0],
                         "stderr": [0.01] * 3})
    gap = figures.train_heldout_gap(train, held)
    assert gap["step"].tolist() == [50, 200]  # no train point is nearer 300 than 200: not extrapolated
    assert gap["gap"].tolist() == pytest.approx([0.1, 0.2])  # 50: the median of 4.0 and 3.0


def test_train_heldout_gap_sees_through_the_scatter_of_train_loss():
    rng = np.random.default_rng(2)
    steps = np.arange(20_000)
    level = 3 + 2 * (steps + 100.0) ** -0.3
    train = series(steps, level + rng.normal(0, 0.2, steps.size))  # a real run's step-to-step scatter
    checkpoints = np.arange(125, 20_000, 125)
    held = pd.DataFrame({"set": "c4", "step": checkpoints, "loss": level[checkpoints] + 0.05, "stderr": 0.01})
    gap = figures.train_heldout_gap(train, held)
    assert len(gap) == len(checkpoints)
    # Set against one step's train loss, the gap would scatter by 0.2 around its 0.05.
    assert np.abs(gap["gap"].to_numpy() - 0.05).max() < 0.06


def test_reference_delta_follows_the_detectors_threshold():
    rng = np.random.default_rng(1)
    s = np.arange(5000)
    ref = 3 + 5 * (s + 50.0) ** -0.4 + rng.normal(0, 0.02, len(s))
    tied = series(s, ref + rng.normal(0, 0.02, len(s)))
    below = series(s, ref - 0.15 + rng.normal(0, 0.02, len(s)))
    detector = ReferenceDivergence()
    windows, points = figures.reference_delta(tied, series(s, ref))
    assert len(points) == len(s)
    # Window medians of pure noise stay inside the band; the band is at least three between-run
    # standard deviations at the reference's level.
    assert (np.abs(windows["delta"]) < windows["band"]).all()
    assert (windows["band"] >= detector.z_threshold * detector.noise_level * 3.0).all()
    # Each window spans the detector's window (100 steps of a run logged every step).
    assert np.median(np.diff(windows["x"])) == pytest.approx(detector.window_steps, rel=0.05)
    low, _ = figures.reference_delta(below, series(s, ref))
    late = low[low["x"] > 1000]
    assert (late["delta"] < -late["band"]).all()
    assert late["delta"].median() == pytest.approx(-0.15, abs=0.01)


def test_reference_delta_draws_the_band_its_detector_declares(monkeypatch):
    from monitor.detectors import REGISTRY, drawn_by
    from monitor.schema import Drawing

    # The train chart's band is the one detector that declares it, found by its declaration.
    assert type(drawn_by(Drawing.DELTA_BAND)) is ReferenceDivergence
    s = np.arange(1000)
    monkeypatch.setattr("monitor.detectors.REGISTRY", {n: c for n, c in REGISTRY.items() if c is not ReferenceDivergence})
    assert drawn_by(Drawing.DELTA_BAND) is None
    # With no detector declaring one, the delta is still drawn, without a band.
    windows, points = figures.reference_delta(series(s, np.full(len(s), 3.1)), series(s, np.full(len(s), 3.0)))
    assert len(points) == len(s) and len(windows) > 0
    assert windows["band"].isna().all() and np.allclose(windows["delta"], 0.1)


def test_reference_delta_draws_the_band_with_the_settings_the_run_was_judged_with():
    s = np.arange(3000)
    run, ref = series(s, np.full(len(s), 3.0)), series(s, np.full(len(s), 3.0))
    default, _ = figures.reference_delta(run, ref)
    wider, _ = figures.reference_delta(run, ref, params={"reference_divergence": {"noise_level": 0.02}})
    # A noiseless, flat pair: the band is all between-run spread, which scales with the setting.
    detector = ReferenceDivergence()
    assert np.allclose(wider["band"], default["band"] * 0.02 / detector.noise_level, rtol=1e-6)


def test_reference_delta_caps_windows_on_a_long_view_and_uses_only_overlap():
    s = np.arange(0, 1_000_000, 500)  # a downsampled million-step view: 2,000 points
    windows, points = figures.reference_delta(series(s, np.ones(len(s))), series(s[:1000], np.ones(1000)))
    assert points["x"].max() <= s[999]
    assert len(windows) <= 200


def test_reference_delta_on_a_token_axis_compares_equal_tokens():
    s = np.arange(2000)
    run = figures.with_x(series(s, 3 - s * 1e-4), lambda v: v * 1000.0)
    # The reference's batch is twice as large: its step k has the tokens of the run's step 2k.
    ref = figures.with_x(series(s[:1000], 3 - 2 * s[:1000] * 1e-4), lambda v: v * 2000.0)
    windows, points = figures.reference_delta(run, ref)
    assert np.abs(points["delta"]).max() < 1e-9
