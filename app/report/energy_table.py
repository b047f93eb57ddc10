"""The energy, emissions and water table: both runs, with the factors that produced it."""

from __future__ import annotations

from dataclasses import asdict

from app.report.energy import EnergyParams, estimate
from app.report.model import Column, Table
from app.report.pair import ComparedPair


def energy_table(pair: ComparedPair, params: EnergyParams | None = None) -> Table:
    params = params or EnergyParams()
    table = Table(
        id="energy",
        title="Estimated energy, emissions and water",
        columns=[
            Column("run", "run", fmt=""),
            Column("gpus", "GPUs", fmt="d"),
            Column("compute_hours", "hours", fmt=",.3g"),
            Column("redone_steps", "redone steps", fmt=","),
            Column("gpu_hours", "GPU-hours", fmt=",.4g"),
            Column("energy_kwh", "energy kWh", fmt=",.4g"),
            Column("co2_kg", "CO₂e kg", fmt=",.4g"),
            Column("water_l", "water L", fmt=",.4g"),
            Column("missing", "not estimated because", fmt=""),
        ],
        note=(f"OLMo 2's method: energy = {params.gpu_power_w:g} W per GPU × GPU-hours × PUE "
              f"{params.pue:g}; CO₂e = energy × {params.carbon_intensity_kg_per_kwh:g} kg/kWh; water = "
              f"energy × ({params.wue_onsite_l_per_kwh:g} + {params.wue_offsite_l_per_kwh:g}) L/kWh "
              f"(on site + off site). Hours are the run's own step times, redone steps included; "
              f"every factor is a parameter of `gapwatch report`."),
    )
    for data, _ in pair.each_run():
        e = estimate(data, params)
        row = asdict(e)
        table.rows.append(row)
    return table
