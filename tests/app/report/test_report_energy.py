"""The energy, emissions and water estimate: OLMo 2's arithmetic on the run's own step times."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from monitor import schema
from monitor.schema import RunData, RunInfo

from app.report.energy import EnergyParams, estimate
from app.report.uncertainty import scatter_sigma


def run_with(step_times: dict[int, float], config=None, tokens_per_step=None, repeats=None, key=schema.PERF_STEP_TIME_S):
    frame = pd.DataFrame({key: pd.Series(step_times, dtype=float)})
    frame.index = frame.index.astype("int64")
    frame.index.name = "step"
    data = RunData(info=RunInfo(name="r", tokens_per_step=tokens_per_step, config=config or {}), scalars=frame)
    if repeats is not None:
        data.repeats = repeats
    return data


def test_olmo2_arithmetic_with_every_factor_a_parameter():
    run = run_with({s: 1.8 for s in range(1, 2001)})  # 2,000 steps of 1.8 s = 1 hour
    params = EnergyParams(gpu_power_w=500, pue=1.5, carbon_intensity_kg_per_kwh=0.4, wue_onsite_l_per_kwh=0.5,
                          wue_offsite_l_per_kwh=2.0, gpus=64)
    e = estimate(run, params)
    assert e.compute_hours == pytest.approx(1.0)
    assert e.gpu_hours == pytest.approx(64.0)
    assert e.energy_kwh == pytest.approx(0.5 * 64 * 1.5)  # kW x GPU-hours x PUE = 48 kWh
    assert e.co2_kg == pytest.approx(48 * 0.4)
    assert e.water_l == pytest.approx(48 * 2.5)
    assert e.missing == ""


def test_defaults_are_the_olmo2_report_factors():
    p = EnergyParams()
    assert (p.gpu_power_w, p.pue, p.carbon_intensity_kg_per_kwh) == (700.0, 1.2, 0.332)
    assert (p.wue_onsite_l_per_kwh, p.wue_offsite_l_per_kwh, p.gpus) == (0.0, 1.29, None)


def test_sparse_step_times_stand_for_every_step_and_gpus_come_from_config():
    run = run_with({s: 2.0 for s in range(100, 3601, 100)}, config={"num_gpus": 8})  # every 100th step
    e = estimate(run, EnergyParams())
    assert e.gpus == 8
    assert e.compute_hours == pytest.approx(3501 * 2.0 / 3600)


def test_redone_steps_after_a_restart_are_charged():
    rep = pd.DataFrame({"key": [schema.PERF_STEP_TIME_S] * 4, "step": [5, 5, 6, 6], "attempt": [1, 2, 1, 2],
                        "value": [30.0, 1.0, 40.0, 1.0]})
    e = estimate(run_with({s: 1.0 for s in range(1, 11)}, repeats=rep), EnergyParams(gpus=1))
    assert e.redone_steps == 2
    assert e.compute_hours == pytest.approx((10 * 1.0 + 30.0 + 40.0) / 3600)


def test_tokens_per_second_with_tokens_per_step_give_step_times():
    run = run_with({s: 4096.0 for s in range(1, 3601)}, tokens_per_step=8192, key=schema.PERF_TOKENS_PER_S)
    assert estimate(run, EnergyParams(gpus=2)).compute_hours == pytest.approx(2.0)


def test_missing_inputs_are_named_not_guessed():
    e = estimate(run_with({1: 1.0, 2: 1.0}), EnergyParams())
    assert e.energy_kwh is None and e.missing == "GPU count unknown (pass --gpus)"
    e = estimate(run_with({1: 5.0}, key=schema.TRAIN_LOSS), EnergyParams(gpus=4))
    assert e.energy_kwh is None and e.missing.startswith("no perf/step_time_s")


@pytest.mark.parametrize("kwargs", [{"pue": 0.8}, {"gpu_power_w": -1.0}, {"carbon_intensity_kg_per_kwh": math.inf},
                                    {"wue_offsite_l_per_kwh": math.nan}])
def test_impossible_factors_are_refused(kwargs):
    with pytest.raises(ValueError):
        EnergyParams(**kwargs)


def test_scatter_sigma_recovers_noise_on_a_drifting_difference():
    rng = np.random.default_rng(0)
    x = np.arange(200)
    drift = 0.01 * np.sin(x / 40.0)  # a slowly moving real difference
    assert scatter_sigma(drift + rng.normal(0, 0.002, x.size)) == pytest.approx(0.002, rel=0.15)
    assert math.isnan(scatter_sigma(np.array([1.0, 2.0, 3.0])))
