"""The train–held-out gap panel on a run whose train loss scatters as a real one does: the gap is
taken against the store's local means of train loss, not against the min/max points a downsampled
chart draws, so a memorizing run's widening gap stands out of the noise at any point budget."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.dashboard import panels, queries
from app.dashboard.routes import ViewSpec
from monitor.schema import TRAIN_LOSS, heldout_key
from monitor.store import open_store

STEPS = 20_000
EVERY = 125
GAP = {"memorizing": 0.15, "reference": 0.05}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('gap') / 'gap.db'}"
    rng = np.random.default_rng(5)
    steps = np.arange(STEPS)
    level = 3 + 2 * (steps + 100.0) ** -0.3
    checkpoints = steps[EVERY::EVERY]
    with open_store(url) as store:
        for run, gap in GAP.items():
            store.ensure_run(run, reference="reference" if run == "memorizing" else None)
            store.write_metrics(run, pd.concat([
                # The step-to-step scatter of a real 1.5B run's train loss late in training.
                pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": level + rng.normal(0, 0.2, STEPS)}),
                pd.DataFrame({"step": checkpoints, "key": heldout_key("c4", "loss"), "value": level[checkpoints] + gap}),
            ], ignore_index=True))
    return url


@pytest.mark.parametrize("max_points", [2000, 300])
@pytest.mark.parametrize("step_range", [None, (5_000, 9_000)])
def test_the_gap_of_each_run_stands_out_of_the_train_loss_scatter(url, max_points, step_range):
    with open_store(url, read_only=True) as store:
        view = queries.load_view(store, ViewSpec(run="memorizing", reference="reference"), max_points, step_range)
    gap = panels.build(view).figures["gap"]
    for run, truth in GAP.items():
        # The run's lines ("<set> · <run>"), not its legend entry.
        y = np.concatenate([np.asarray(t.y, dtype=float) for t in gap.data if t.name and t.name.endswith(f" · {run}")])
        assert len(y) >= 30, run
        # Against a downsampled chart's min/max points the gap scattered by 0.3 nats and more; here
        # no checkpoint of either run comes near the other run's gap, 0.1 away.
        error = np.abs(y - truth)
        assert np.median(error) < 0.03 and error.max() < 0.08, (run, np.median(error), error.max())
