"""The band of a W&B chart panel export: `<metric>__MIN` and `<metric>__MAX` beside `<metric>`.

When W&B samples a chart it merges neighbouring points into one and exports, per run, the value
it kept and the min and max of the points it merged. They are not values the run logged, but they
say how far the run strayed between the points kept, so they are stored beside the metric as
`band/min/<key>` and `band/max/<key>` (`schema.band_key`), `<key>` being the metric's gapwatch
key: the profile maps the metric, the band follows it (scale included), and no detector reads it
as the metric. A band whose metric is not kept (dropped by the profile, or absent) is left out.

`split_band` takes the band rows out of a raw import before its names are weighed (they would
otherwise count as series of their own); `attach_band` puts them back once the metric is mapped.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from monitor import schema

from ..imported_run import ImportedRun
from ..meaning import cadences
from ..profiles import Profile

_BAND_NAME = re.compile(r"^(?P<metric>.+)__(?P<side>MIN|MAX)$")


def split_band(raw: ImportedRun) -> tuple[ImportedRun, pd.DataFrame | None]:
    """raw without its band rows, and those rows (None when it has none) with the source metric
    in `metric` and `min`/`max` in `side`."""
    # Names are matched once each, not once a row (a history holds millions of rows).
    found = {str(n): _BAND_NAME.match(str(n)) for n in pd.unique(raw.scalars["key"])}
    found = {n: m for n, m in found.items() if m}
    if not found:
        return raw, None
    is_band = raw.scalars["key"].astype(str).isin(list(found)).to_numpy()
    band = raw.scalars.loc[is_band].copy()
    names = band["key"].astype(str)
    band["metric"] = names.map({n: m.group("metric") for n, m in found.items()}).to_numpy()
    band["side"] = names.map({n: m.group("side").lower() for n, m in found.items()}).to_numpy()
    raw.scalars = raw.scalars.loc[~is_band].reset_index(drop=True)
    return raw, band


def attach_band(run: ImportedRun, band: pd.DataFrame | None, profile: Profile) -> ImportedRun:
    """run (mapped) with the band rows of its kept metrics added as `band/<side>/<key>`, a
    mapping row for each band column and one note."""
    if band is None or band.empty:
        return run
    kept = band["metric"].isin(list(run.key_map)).to_numpy()
    dropped = sorted(set(band.loc[~kept, "metric"]))
    band = band.loc[kept]
    if not band.empty:
        metric = band["metric"].to_numpy()
        scale = np.array([profile.map_name(m)[1] for m in metric])
        rows = band.assign(
            key=[schema.band_key(run.key_map[m], s) for m, s in zip(metric, band["side"])],
            value=band["value"].to_numpy(dtype="float64") * scale,
        ).drop(columns=["metric", "side"])
        scalars = run.scalars.copy()
        scalars["key"] = scalars["key"].astype(str)
        merged = pd.concat([scalars, rows[scalars.columns]], ignore_index=True)
        # Back in the order the file holds them: attempts, then steps, grow along it.
        run.scalars = merged.sort_values(["attempt", "step"], kind="stable",
                                         ignore_index=True)
    for (metric, side), rows_of in band.groupby(["metric", "side"], sort=False):
        (c,) = cadences(rows_of).values()
        run.mapping.append({
            "source": f"{metric}__{side.upper()}", "key": schema.band_key(run.key_map[metric], side),
            "cadence": c.describe(), "count": c.count,
            "reason": f"W&B chart band around {metric}"})
    columns = band.groupby(["metric", "side"]).ngroups
    note = (f"{run.source}: kept {columns} __MIN/__MAX column(s) as the band around their "
            "metric (band/min/<key>, band/max/<key>): the range of the points W&B merged when it "
            "sampled the chart")
    if dropped:
        note += f"; left out the band of {len(dropped)} metric(s) not kept"
    run.notes.append(note)
    return run


__all__ = ["split_band", "attach_band"]
