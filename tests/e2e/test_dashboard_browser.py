"""The dashboard in headless Chromium against a real `gapwatch dashboard` process and store.

Covers what a person sees: the runs overview, a run drawn against its reference, a step written
while the page is open appearing without a reload, an alert appearing, a mouse-drag zoom that
brings every point of the range, and authentication off loopback. Screenshots of each view go to
test-output/screenshots/.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from dashboard_browser import (
    REPO,
    dashboard_process,
    drag_zoom,
    follow_link,
    free_port,
    panel_js,
    screenshot,
    trace_js,
    wait_for_panel,
)
from dashboard_store import add_alert, build
from playwright.sync_api import Error as PlaywrightError

from app.figures.overlay import series_uid
from monitor.schema import TRAIN_GRAD_NORM, TRAIN_LOSS
from monitor.store import open_store

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN, REFERENCE = "olmo-repro", "olmo-reference"
# A run name that is markup, a path and a query at once: it must show as text and route as a name.
HOSTILE = 'evil/<img src=x onerror="alert(1)">?&x=1'
STEPS = 3000
RUN_LOSS, REFERENCE_LOSS = series_uid("run", TRAIN_LOSS), series_uid("reference", TRAIN_LOSS)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'store.db'}"
    build(url, steps=STEPS, run=RUN, reference=REFERENCE)
    return url


@pytest.fixture(scope="module")
def server(store_url):
    with dashboard_process(store_url) as (base, _proc):
        yield base


@pytest.fixture(scope="module")
def browser(chromium):
    return chromium


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = context.new_page()
    pg.errors, pg.dialogs = [], []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    context.close()


def open_run(page, url: str) -> None:
    page.goto(url)
    wait_for_panel(page, "loss")
    page.wait_for_function("document.getElementById('resolution').innerText.length > 0")


def test_overview_lists_runs_and_run_view_draws_run_and_reference(server, page):
    page.goto(server + "/")
    page.wait_for_selector("tr.run-row")
    names = page.locator("a.run-link").all_inner_texts()
    assert {RUN, REFERENCE} <= set(names)
    row = page.locator("tr.run-row", has_text=RUN).first
    assert row.locator(".health").inner_text() == "critical"  # its open critical alert
    assert row.locator(".alerts-count").inner_text() == "1"
    # plotly.js is loaded while the overview shows, so a run page's panels need not wait for it.
    page.wait_for_function("typeof window.Plotly !== 'undefined'", timeout=30_000)
    screenshot(page, "overview")

    follow_link(page, page.locator("a.run-link", has_text=RUN), f"/run/{RUN}")
    wait_for_panel(page, "loss")
    assert page.url.endswith(f"/run/{RUN}")
    run_x = page.wait_for_function(f"(() => {{ const x = {trace_js(RUN_LOSS)}; return x && x.length > 0 && x; }})()").json_value()
    ref_x = page.evaluate(trace_js(REFERENCE_LOSS))
    assert run_x[-1] == STEPS - 1 and ref_x[-1] == STEPS - 1
    assert 0 < len(run_x) <= 2000  # the default point budget, not all 3,000 steps
    for panel in ("delta", "heldout", "gap", "evals", "grad_norm", "throughput", "data"):
        wait_for_panel(page, panel)
    page.wait_for_selector("li.alert")
    time.sleep(0.5)
    screenshot(page, "run")
    assert not page.errors, page.errors


def test_hostile_run_name_is_text_everywhere(server, page, store_url):
    with open_store(store_url) as store:
        store.ensure_run(HOSTILE, reference=REFERENCE)
        store.write_metrics(HOSTILE, pd.DataFrame({"step": np.arange(50), "key": TRAIN_LOSS,
                                                   "value": np.linspace(4.0, 3.5, 50)}))
    page.goto(server + "/")
    link = page.locator("a.run-link", has_text="evil/")
    link.wait_for(timeout=30_000)
    assert link.inner_text() == HOSTILE
    assert page.locator("img[src='x']").count() == 0
    link.click()
    wait_for_panel(page, "loss")
    assert page.locator("#run-title").inner_text() == HOSTILE
    legend = page.evaluate(f"Array.from({panel_js('loss')}.querySelectorAll('.legendtext')).map(e => e.textContent)")
    assert HOSTILE in legend  # plotly shows the escaped name as the literal characters
    assert page.locator("img[src='x']").count() == 0
    assert not page.dialogs


def test_step_written_while_page_is_open_appears(server, page, store_url):
    open_run(page, f"{server}/run/{RUN}")
    page.evaluate("window.sameDocument = true")
    new_steps = np.arange(STEPS, STEPS + 5)
    with open_store(store_url) as store:
        store.write_metrics(RUN, pd.DataFrame({"step": new_steps, "key": TRAIN_LOSS, "value": 2.9}))
    page.wait_for_function(
        f"(() => {{ const x = {trace_js(RUN_LOSS)}; return x && x[x.length - 1] === {STEPS + 4}; }})()",
        timeout=30_000)
    assert page.evaluate("window.sameDocument === true")  # appended in place, no reload
    assert not page.errors, page.errors


def test_any_logged_series_can_be_picked_and_is_drawn_run_over_reference(server, page, store_url):
    steps = np.arange(STEPS)
    with open_store(store_url) as store:
        for name, peak in ((RUN, 3e-4), (REFERENCE, 6e-4)):
            store.write_metrics(name, pd.DataFrame({"step": steps, "key": "optim/lr",
                                                    "value": peak * np.cos(np.pi * steps / (2 * STEPS))}))
    open_run(page, f"{server}/run/{RUN}")
    page.click("#series-pick")
    page.locator("input.dash-dropdown-search").fill("optim/lr")  # the search of the list that opened
    option = page.get_by_role("option", name="optim/lr", exact=True)
    option.wait_for(state="visible", timeout=30_000)
    option.click()
    uids = (f"(() => {{ const gd = {panel_js('picked')}; return gd && gd._fullData ? "
            "gd._fullData.map(t => t.uid).filter(u => /^(run|reference)-/.test(u)) : []; })()")
    page.wait_for_function(f"{uids}.length === 2", timeout=30_000)
    assert sorted(page.evaluate(uids)) == sorted([series_uid("run", "optim/lr"), series_uid("reference", "optim/lr")])
    screenshot(page, "picked-series")
    # The pick lives in the URL: a link opens the same view.
    page.wait_for_function("location.search.includes('series=optim%2Flr')", timeout=30_000)
    shared = page.url
    open_run(page, shared)
    page.wait_for_function(f"{uids}.length === 2", timeout=30_000)
    assert not page.errors, page.errors


def test_alert_appears(server, page, store_url):
    open_run(page, f"{server}/run/{RUN}")
    page.wait_for_selector("li.alert")
    # The watch service's alerts alone: no whole-run judgement says what could not be judged.
    assert "No whole-run judgement of this run is stored" in page.locator("#not-judged-list").inner_text()
    message = "held-out <b>c4</b> loss 0.05 above the reference"
    with open_store(store_url) as store:
        add_alert(store, RUN, "heldout_divergence", "eval/heldout/c4_en/loss", "warning", 1200, 1500, message)
    item = page.locator("li.alert", has_text="c4</b> loss")
    item.wait_for(timeout=30_000)
    assert item.locator(".message").inner_text() == message
    link = item.locator("a.alert-link")
    assert link.get_attribute("href") == f"/run/{RUN}?start=1200&end=1500"
    screenshot(page, "alerts")
    link.click()
    page.wait_for_function(f"(() => {{ const x = {trace_js(RUN_LOSS)};"
                           " return x && x[0] >= 1000 && x[x.length - 1] <= 1700; })()", timeout=30_000)
    time.sleep(0.5)
    screenshot(page, "alert-link-range")
    assert not page.errors, page.errors


def test_findings_stored_by_detect_show_on_the_overview_and_the_run_view(server, page, store_url):
    """A run judged only by `gapwatch detect` (no watch service, so no alert): its critical finding
    marks it on the landing page and is listed, linked, under its timeline."""
    run, nan_step = "judged-offline", 250
    loss = 3.0 + np.random.default_rng(0).normal(0, 0.01, 400)
    loss[nan_step] = np.nan
    with open_store(store_url) as store:
        store.ensure_run(run, status="finished")
        store.write_metrics(run, pd.DataFrame({"step": np.arange(400), "key": TRAIN_LOSS, "value": loss}))
    detect = subprocess.run([sys.executable, "-m", "app", "detect", "--run", run, "--store", store_url],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert detect.returncode == 0, detect.stderr
    assert "NaN or Inf in the run" in detect.stdout  # the incident, named by its detector's explanation
    page.goto(server + "/")
    row = page.locator("tr.run-row", has_text=run)
    row.wait_for(timeout=30_000)
    assert row.locator(".health").inner_text() == "had critical"
    assert row.locator(".alerts-count").inner_text() == "0"
    follow_link(page, row.locator("a.run-link"), f"/run/{run}")
    wait_for_panel(page, "loss")
    item = page.locator("li.alert", has_text="NaN or Inf in the run")
    item.wait_for(timeout=30_000)
    assert item.locator(".sev").inner_text() == "critical"
    # 149 finite steps followed the NaN: resolved, as `gapwatch detect` listed it.
    assert "\tresolved\t" in detect.stdout and item.locator(".state").inner_text() == "resolved"
    assert f"steps {nan_step}–{nan_step}" in item.locator("a.alert-link").inner_text()
    bars = page.evaluate("document.querySelector('#alerts-graph .js-plotly-plot').data.map(t => t.y).flat()")
    assert "NaN or Inf in the run" in [label.replace("<br>", " ") for label in bars]  # the incident's name
    # What that detect could not judge is listed under the findings, not left as silence.
    needs_reference = page.locator("li.not-judged-item", has_text="train loss against the reference")
    assert "compares with a reference run and none was given" in needs_reference.inner_text()
    assert "The last gapwatch detect judged to step 399." in page.locator("#not-judged-list").inner_text()
    screenshot(page, "findings-from-detect")
    assert not page.errors, page.errors


def test_mouse_drag_zoom_shows_every_point(server, page):
    open_run(page, f"{server}/run/{RUN}")
    assert page.inner_text("#resolution").startswith("downsampled")
    drag_zoom(page, "loss", 1000, 1300)
    page.wait_for_function("document.getElementById('resolution').innerText.startsWith('full resolution')",
                           timeout=30_000)
    x = page.wait_for_function(
        f"(() => {{ const x = {trace_js(RUN_LOSS)}; return x && x[0] >= 990 && x; }})()").json_value()
    assert x == list(range(x[0], x[-1] + 1))  # every step, none skipped
    assert x[0] <= 1010 and x[-1] >= 1290
    # The other panels followed the zoom.
    grad_x = page.evaluate(trace_js(series_uid("run", TRAIN_GRAD_NORM)))
    assert grad_x[0] == x[0] and grad_x[-1] == x[-1]
    time.sleep(0.5)
    screenshot(page, "run-zoomed")
    page.click("#show-all")
    page.wait_for_function("document.getElementById('resolution').innerText.startsWith('downsampled')",
                           timeout=30_000)
    assert page.evaluate(trace_js(RUN_LOSS))[0] == 0
    assert not page.errors, page.errors


def test_compare_any_two_runs_and_token_axis(server, page):
    open_run(page, f"{server}/run/{REFERENCE}?ref={RUN}&axis=tokens")
    ref_x = page.wait_for_function(f"(() => {{ const x = {trace_js(REFERENCE_LOSS)}; return x && x; }})()").json_value()
    assert max(ref_x) > 1e8  # tokens, not steps
    time.sleep(0.5)
    screenshot(page, "compare-tokens")
    assert not page.errors, page.errors


def test_refuses_to_bind_off_loopback_without_auth(store_url):
    out = subprocess.run([sys.executable, "-m", "app", "dashboard", "--store", store_url, "--host", "0.0.0.0",
                          "--port", str(free_port())], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "refusing to serve on 0.0.0.0 without authentication" in out.stderr


def test_authentication_demanded_off_loopback(store_url, browser):
    token, password = "t0ken-for-the-browser-test", "pass-for-the-browser-test"
    env = {"GAPWATCH_DASHBOARD_TOKEN": token, "GAPWATCH_DASHBOARD_PASSWORD": password}
    with dashboard_process(store_url, host="0.0.0.0", env=env) as (base, _):
        anonymous = browser.new_context()
        page = anonymous.new_page()
        response = page.request.get(base + "/")
        assert response.status == 401 and response.text() == "authentication required\n"
        assert response.headers["www-authenticate"].startswith("Basic")
        assert page.request.get(base + "/_dash-layout").status == 401
        assert page.request.get(base + "/?token=wrong-token-value").status == 401
        # The browser itself, offered basic auth with no credentials to give, is refused.
        with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            anonymous.new_page().goto(base + "/")
        page.goto(f"{base}/?token={token}")
        page.wait_for_selector("tr.run-row")
        assert "token=" not in page.url  # the token is swapped for a session cookie
        anonymous.close()

        with_password = browser.new_context(http_credentials={"username": "gapwatch", "password": password})
        page = with_password.new_page()
        assert page.goto(base + "/").status == 200
        page.wait_for_selector("tr.run-row")
        with_password.close()
