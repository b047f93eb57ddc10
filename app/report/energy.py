"""Estimated energy, emissions and water of a run, by the method of the OLMo 2 report.

    energy (kWh)  = GPU power (kW) x GPU-hours x PUE
    CO2e (kg)     = energy x carbon intensity of the grid (kg CO2e / kWh)
    water (L)     = energy x (WUE on site + WUE off site) (L / kWh)

Source of the method and of the defaults below: Team OLMo, "2 OLMo 2 Furious" (arXiv:2501.00656),
section 6.5 and table 19, the estimate for OLMo 2 7B on Ai2's Jupiter H100 cluster (Morrison et al.,
arXiv:2503.05804, extends it to model development). Every factor is a parameter: the numbers
describe that cluster, not yours.

GPU-hours come from the run itself: the time its steps took (perf/step_time_s, or tokens per step
over perf/tokens_per_s), including steps that were computed and then redone after a restart,
times the number of GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from monitor import schema
from monitor.schema import RunData

# Keys under which a run's config says how many accelerators it used (our trainer's `devices` first, then the
# names other trainers' configs use).
GPU_COUNT_CONFIG_KEYS = ("devices", "num_devices", "num_gpus", "n_gpus", "gpus", "world_size", "device_count")


@dataclass
class EnergyParams:
    """The factors of the estimate; defaults are the OLMo 2 report's (module docstring)."""

    # Watts drawn per GPU. OLMo 2 measured each node's draw every 25 ms and averaged it; a run that
    # logs no power is charged the H100 SXM's thermal design power (NVIDIA datasheet: 700 W), an
    # upper bound.
    gpu_power_w: float = 700.0
    # Power usage effectiveness of the data centre: total facility energy / IT energy (OLMo 2,
    # Jupiter: 1.2).
    pue: float = 1.2
    # Grid carbon intensity, kg CO2e per kWh (OLMo 2: Austin Energy, which powers Jupiter, 0.332).
    carbon_intensity_kg_per_kwh: float = 0.332
    # Water evaporated on site per kWh, L/kWh (OLMo 2: 0, the cluster is cooled in a closed loop).
    wue_onsite_l_per_kwh: float = 0.0
    # Water consumed generating the electricity, L/kWh (OLMo 2, after Reig et al. 2020, for Jupiter's
    # grid: 1.29).
    wue_offsite_l_per_kwh: float = 1.29
    # GPUs the run used; None takes it from the run's config (GPU_COUNT_CONFIG_KEYS).
    gpus: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"energy parameter {f.name} must be a finite number >= 0, not {value!r}")
        if self.pue < 1:
            raise ValueError(f"PUE is total over IT energy and cannot be below 1, not {self.pue!r}")


@dataclass
class EnergyEstimate:
    """The estimate for one run, or the reason there is none."""

    run: str
    gpus: int | None
    compute_hours: float | None  # wall-clock hours of the run's steps
    gpu_hours: float | None
    energy_kwh: float | None
    co2_kg: float | None
    water_l: float | None
    redone_steps: int = 0  # steps computed twice because of restarts (counted in the hours)
    missing: str = ""  # why there is no estimate


def gpu_count(run: RunData, params: EnergyParams) -> int | None:
    if params.gpus is not None:
        return int(params.gpus)
    for key in GPU_COUNT_CONFIG_KEYS:
        value = run.info.config.get(key)
        if isinstance(value, (int, float)) and value > 0:
            return int(value)
    return None


def compute_seconds(run: RunData) -> tuple[float | None, int]:
    """Seconds the run's steps took, and how many steps were redone after restarts.

    A run that logs its step time only every k steps is charged its mean step time for every
    step from its first to its last logged one.
    """
    times = _step_times(run)
    if times is None or len(times) == 0:
        return None, 0
    steps = run.scalars.index.to_numpy()
    trained = int(steps[-1] - steps[0] + 1) if len(steps) else 0
    mean = float(np.mean(times.to_numpy()))
    redone = _redone(run)
    redone_seconds = float(np.nansum(redone)) if redone is not None else 0.0
    return mean * trained + redone_seconds, 0 if redone is None else len(redone)


def _step_times(run: RunData):
    st = run.series(schema.PERF_STEP_TIME_S)
    st = st[np.isfinite(st.to_numpy(dtype=float)) & (st.to_numpy(dtype=float) > 0)]
    if len(st):
        return st
    tps = run.series(schema.PERF_TOKENS_PER_S)
    tps = tps[np.isfinite(tps.to_numpy(dtype=float)) & (tps.to_numpy(dtype=float) > 0)]
    if len(tps) and run.info.tokens_per_step:
        return float(run.info.tokens_per_step) / tps
    return None


def _redone(run: RunData):
    """Step times logged by attempts whose steps a later attempt computed again."""
    rep = run.repeats
    if not len(rep):
        return None
    rows = rep[rep["key"] == schema.PERF_STEP_TIME_S]
    if not len(rows):
        return None
    latest = rows.groupby("step")["attempt"].transform("max")
    earlier = rows[rows["attempt"] < latest]["value"].to_numpy(dtype=float)
    return earlier[np.isfinite(earlier)]


def estimate(run: RunData, params: EnergyParams) -> EnergyEstimate:
    gpus = gpu_count(run, params)
    seconds, redone = compute_seconds(run)
    missing = []
    if seconds is None:
        missing.append(f"no {schema.PERF_STEP_TIME_S} (nor {schema.PERF_TOKENS_PER_S} with tokens per step)")
    if gpus is None:
        missing.append("GPU count unknown (pass --gpus)")
    if missing:
        return EnergyEstimate(run.name, gpus, None if seconds is None else seconds / 3600, None, None,
                              None, None, redone, "; ".join(missing))
    hours = seconds / 3600.0
    gpu_hours = hours * gpus
    energy = params.gpu_power_w / 1000.0 * gpu_hours * params.pue
    return EnergyEstimate(
        run=run.name,
        gpus=gpus,
        compute_hours=hours,
        gpu_hours=gpu_hours,
        energy_kwh=energy,
        co2_kg=energy * params.carbon_intensity_kg_per_kwh,
        water_l=energy * (params.wue_onsite_l_per_kwh + params.wue_offsite_l_per_kwh),
        redone_steps=redone,
    )
