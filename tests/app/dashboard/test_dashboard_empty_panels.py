"""What a panel says when it has nothing to draw: left out of the page, with why, when the whole
run logged nothing for it; a note in the chart when its series are logged but nothing of them can
be drawn (none in the step range shown, or only NaN)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.dashboard import panels, queries
from app.dashboard.routes import ViewSpec
from monitor.schema import TRAIN_GRAD_NORM, TRAIN_LOSS
from monitor.store import open_store


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'panels.db'}"
    steps = np.arange(100)
    with open_store(url) as store:
        store.ensure_run("early-grad-norm")
        store.write_metrics("early-grad-norm", pd.concat([
            pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": 3.0 - steps / 100}),
            pd.DataFrame({"step": steps[:50], "key": TRAIN_GRAD_NORM, "value": 1.0}),
        ], ignore_index=True))
        store.ensure_run("nan-grad-norm")
        store.write_metrics("nan-grad-norm", pd.concat([
            pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": 3.0 - steps / 100}),
            pd.DataFrame({"step": steps, "key": TRAIN_GRAD_NORM, "value": np.nan}),
        ], ignore_index=True))
    return url


def notes(fig) -> str:
    return " ".join(a.text for a in fig.layout.annotations)


def test_a_panel_logged_only_outside_the_range_says_so_and_one_never_logged_is_left_out(url):
    with open_store(url, read_only=True) as store:
        whole = panels.build(queries.load_view(store, ViewSpec(run="early-grad-norm"), 500, None))
        zoomed = panels.build(queries.load_view(store, ViewSpec(run="early-grad-norm"), 500, (60, 90)))
    for rendered in (whole, zoomed):
        assert set(rendered.left_out) == {"delta", "heldout", "heldout_delta", "gap", "evals", "throughput", "data", "picked"}
        assert rendered.left_out_line().startswith("Not drawn: train loss delta (no reference run), held-out loss "
                                                   "(not logged)")
    # Drawn over the whole run; in a range past its last step, the chart says why it is empty.
    assert len(whole.figures["grad_norm"].data) > 0 and notes(whole.figures["grad_norm"]) == ""
    assert len(zoomed.figures["grad_norm"].data) == 0
    assert notes(zoomed.figures["grad_norm"]) == ("no finite grad norm in this step range (show all steps to see the "
                                                  "rest)")
    assert len(zoomed.figures["loss"].data) > 0


def test_a_metric_logged_only_as_nan_says_so_at_any_point_budget(url):
    with open_store(url, read_only=True) as store:
        # A downsampled read keeps finite values only; a full one keeps the NaN rows.
        for budget in (20, 100_000):
            rendered = panels.build(queries.load_view(store, ViewSpec(run="nan-grad-norm"), budget, None))
            assert "grad_norm" not in rendered.left_out
            assert "NaN or Inf" in notes(rendered.figures["grad_norm"])
            assert "step range" not in notes(rendered.figures["grad_norm"])


def test_a_pair_that_shares_no_steps_says_so_rather_than_pointing_at_all_steps(tmp_path):
    # The reference ended (steps 0-99) before the run began (200-299): showing all steps would
    # show no train loss of both runs either.
    url = f"sqlite:///{tmp_path / 'apart.db'}"
    with open_store(url) as store:
        for name, first, last, reference in (("early", 0, 99, None), ("late", 200, 299, "early"),
                                             ("longer", 0, 299, "early")):
            store.ensure_run(name, reference=reference)
            steps = np.arange(first, last + 1)
            store.write_metrics(name, pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": 3.0 - steps / 1000}))
    with open_store(url, read_only=True) as store:
        for step_range in (None, (220, 260)):
            rendered = panels.build(queries.load_view(store, ViewSpec(run="late"), 500, step_range))
            assert notes(rendered.figures["delta"]) == ("the runs share no steps: the run logged train loss at "
                                                        "steps 200–299, the reference at steps 0–99")
        # Where the steps meet, a zoom past the reference's end is rightly told to show all steps.
        zoomed = panels.build(queries.load_view(store, ViewSpec(run="longer"), 500, (220, 260)))
        assert notes(zoomed.figures["delta"]) == ("no train loss of both runs in this step range (show all steps to "
                                                  "see the rest)")


def test_evals_only_the_reference_logged_past_the_runs_steps_are_said_to_be_there(tmp_path):
    """A run of one step against a reference evaluated every 100 steps: the reference is read over
    the run's steps, where it has no evaluation; not 'every logged value is NaN or Inf'."""
    from monitor.schema import downstream_key, heldout_key

    url = f"sqlite:///{tmp_path / 'one.db'}"
    steps = np.arange(1, 1001)
    evals = steps[steps % 100 == 0]
    with open_store(url) as store:
        store.ensure_run("ref")
        store.write_metrics("ref", pd.concat([
            pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": 3.0 - steps / 1000}),
            pd.DataFrame({"step": evals, "key": heldout_key("c4"), "value": 3.1 - evals / 1000}),
            pd.DataFrame({"step": evals, "key": downstream_key("piqa", "acc"), "value": 0.6}),
        ], ignore_index=True))
        store.ensure_run("one", reference="ref")
        store.write_metrics("one", pd.DataFrame({"step": [1], "key": [TRAIN_LOSS], "value": [3.0]}))
        rendered = panels.build(queries.load_view(store, ViewSpec(run="one", reference="ref"), 500, None))
    assert notes(rendered.figures["heldout"]) == ("the run logs no held-out evaluation, and the reference logged "
                                                  "none within its step 1")
    assert notes(rendered.figures["evals"]).startswith("the run logs no downstream evals, and the reference")
