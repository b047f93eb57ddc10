"""The dashboard in headless Chromium over runs whose data the charts did not expect: a token count
that grows non-linearly (the runs overview once listed no runs at all) and one that never grows
(its run page once went blank without a word). Both pages draw; the bad run is named on the page.
A run of one step is drawn as a point."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from dashboard_browser import dashboard_process, panel_js, screenshot, wait_for_panel
from odd_runs_store import PACKED, STUCK, build_odd_runs

from app.figures.overlay import series_uid
from monitor.schema import TRAIN_LOSS
from monitor.store import open_store

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_LOSS, REFERENCE_LOSS = series_uid("run", TRAIN_LOSS), series_uid("reference", TRAIN_LOSS)
PANELS = ("loss", "delta", "heldout", "gap", "evals", "grad_norm", "throughput", "data")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('odd') / 'store.db'}"
    build_odd_runs(url)
    with dashboard_process(url) as (base, _proc):
        yield base


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()


def wait_for_every_panel(page) -> dict[str, str]:
    """Every panel rendered (a left-out one hidden), with traces or with the note saying why it has none:
    {panel: note}."""
    for panel in PANELS:
        page.wait_for_function(f"(() => {{ const gd = {panel_js(panel)}; return gd && gd._fullLayout; }})()",
                               timeout=60_000)
    return {panel: page.evaluate(f"(() => {{ const a = {panel_js(panel)}._fullLayout.annotations || [];"
                                 f" return a.map(x => x.text).join(' '); }})()") for panel in PANELS}


def trace_length(page, uid: str) -> int:
    return page.evaluate(
        "(() => { for (const gd of document.querySelectorAll('.js-plotly-plot')) {"
        "  const t = (gd._fullData || []).find(t => t.uid === %r); if (t) { return t.x.length; } } return 0; })()" % uid)


def test_the_overview_lists_both_runs_with_their_token_counts(server, page):
    page.goto(server + "/")
    page.wait_for_selector("tr.run-row")
    assert set(page.locator("a.run-link").all_inner_texts()) == {PACKED, STUCK}
    # Cells by run (the stuck run's row names the packed one too, as its reference).
    rows = {r.locator("a.run-link").inner_text(): r.locator("td").all_inner_texts()
            for r in page.locator("tr.run-row").all()}
    assert rows[PACKED][5].endswith("M")  # about 10.6M: the cumulative count, read under a 4-point budget
    assert rows[STUCK][5] == "4.10k"
    screenshot(page, "odd-overview")
    assert not page.errors, page.errors


def test_a_non_linear_token_count_draws_on_a_token_axis(server, page):
    page.goto(f"{server}/run/{PACKED}?axis=tokens")
    wait_for_panel(page, "loss")
    wait_for_every_panel(page)
    # Without a reference the delta panel is left out, and the page says so in one line.
    assert page.locator(".panel-delta").is_hidden() and page.locator(".panel-loss").is_visible()
    page.wait_for_function("document.getElementById('notices').innerText.length > 0")
    assert page.locator("#notices").inner_text().startswith("Not drawn: train loss delta (no reference run)")
    assert trace_length(page, RUN_LOSS) > 0
    title = page.evaluate("document.querySelector('.panel-loss .xtitle').textContent")
    assert title == "tokens"
    assert not page.errors, page.errors


def test_a_token_count_that_does_not_grow_draws_on_steps_and_is_named(server, page):
    page.goto(f"{server}/run/{STUCK}?axis=tokens")
    wait_for_panel(page, "loss")
    wait_for_every_panel(page)
    assert trace_length(page, RUN_LOSS) > 0 and trace_length(page, REFERENCE_LOSS) > 0
    page.wait_for_function("document.getElementById('notices').innerText.length > 0")
    notice = page.locator("#notices").inner_text()
    assert f"run '{STUCK}': train/tokens does not grow with steps" in notice and PACKED not in notice
    assert page.locator("#run-title").inner_text() == STUCK
    screenshot(page, "odd-stuck-run")
    assert not page.errors, page.errors


@pytest.fixture(scope="module")
def one_step_server(tmp_path_factory):
    """A run that logged one step, against a reference that logged a hundred."""
    url = f"sqlite:///{tmp_path_factory.mktemp('one') / 'store.db'}"
    with open_store(url) as store:
        store.ensure_run("reference")
        store.write_metrics("reference", pd.DataFrame({"step": np.arange(100), "key": TRAIN_LOSS,
                                                       "value": 5.3 - np.arange(100) * 0.01}))
        store.ensure_run("one", reference="reference")
        store.write_metrics("one", pd.DataFrame({"step": [1], "key": [TRAIN_LOSS], "value": [3.0]}))
    with dashboard_process(url) as (base, _proc):
        yield base


def test_a_run_of_one_step_is_drawn_as_a_point(one_step_server, page):
    # A line through one point draws nothing: the panel showed axes and a legend, no data.
    page.goto(f"{one_step_server}/run/one")
    wait_for_panel(page, "loss")
    markers = page.evaluate("Array.from(document.querySelectorAll('.panel-loss .scatterlayer path.point'))"
                            ".filter(p => p.getBoundingClientRect().width > 2).length")
    assert markers == 2  # the run's step and the reference's at it
    screenshot(page, "odd-one-step-run")
    assert not page.errors, page.errors
