"""The dashboard on a real pair, as a W&B user reads it: Muon against AdamW at 1.5B (modded-nanogpt,
20,344 very noisy steps each, same data order), imported from their logs and judged by `gapwatch
detect`. Checks smoothing (a smoothed line over a faint raw one, computed on every step), one colour
per run in every panel, the view kept in the URL through every control and through an alert link,
the y range that starts after the early transient, and findings grouped into incidents. Screenshots go to test-output/screenshots/.
"""

from __future__ import annotations

import re
import subprocess
import sys
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from dashboard_browser import REPO, dashboard_process, panel_js, screenshot, wait_for_panel

from app.figures.style import REFERENCE_COLOR, RUN_COLOR

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN, REFERENCE = "muon-1.5b", "adamw-1.5b"
LOGS = {"adamw-1.5b": "87bd51fd-6203-4c88-b3aa-8a849a6a83ca.txt", "muon-1.5b": "ad8d7ae5-7b2d-4ee9-bc52-f912e9174d7a.txt"}


def gapwatch(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "app", *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def store_url(tmp_path_factory, shared_data):
    url = f"sqlite:///{tmp_path_factory.mktemp('pair') / 'store.db'}"
    folder = shared_data / "runs" / "modded-nanogpt" / "scaleup1b_2024-10-20"
    for name, log in LOGS.items():
        gapwatch("import", str(folder / log), "--run", name, "--store", url)
    gapwatch("detect", "--run", RUN, "--reference", REFERENCE, "--store", url)
    return url


@pytest.fixture(scope="module")
def server(store_url):
    with dashboard_process(store_url) as (base, _proc):
        yield base


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()


def traces(page, panel: str) -> list[dict]:
    """name, colour, opacity and y values of each trace of a panel."""
    return page.evaluate(f"""(() => {{ const gd = {panel_js(panel)};
        return gd._fullData.map(t => ({{name: t.name, color: (t.line || {{}}).color, opacity: t.opacity,
                                       y: Array.from(t.y || [])}})); }})()""")


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query, keep_blank_values=True).items()}


def test_smoothed_lines_over_faint_raw_ones_in_each_runs_colour(server, page):
    page.goto(f"{server}/run/{RUN}?ref={REFERENCE}&smooth=0.95")
    wait_for_panel(page, "loss")
    page.wait_for_function(f"{panel_js('loss')}._fullData.length === 4", timeout=60_000)
    loss = {t["name"]: t for t in traces(page, "loss")}
    raw, smooth = loss[RUN], loss[f"{RUN} (smoothed)"]
    assert raw["color"] == smooth["color"] == RUN_COLOR
    ref_name = f"{REFERENCE} (reference)"
    assert loss[ref_name]["color"] == loss[f"{ref_name} (smoothed)"]["color"] == REFERENCE_COLOR
    assert raw["opacity"] < 0.5 and smooth["opacity"] == 1
    # The smoothed line averages every step: far less step-to-step noise than the raw one (past the
    # steep first hundreds of steps, where both fall fast).
    assert np.std(np.diff(smooth["y"][200:])) < 0.2 * np.std(np.diff(raw["y"][200:]))
    # The same two colours in the held-out panel: run and reference, never a colour per set.
    wait_for_panel(page, "heldout")
    held = [t for t in traces(page, "heldout") if " · " in t["name"]]  # "<set> · <run>": the lines, not legend keys
    assert {t["color"] for t in held} == {RUN_COLOR, REFERENCE_COLOR}
    assert all(t["color"] == RUN_COLOR for t in held if RUN in t["name"])
    # The early transient (loss ~11 at step 0) does not set the y range.
    y_range = page.evaluate(f"{panel_js('heldout')}._fullLayout.yaxis.range")
    assert max(y_range) < 6
    screenshot(page, "real-pair-muon-vs-adamw-smoothed", full_page=False)
    assert not page.errors, page.errors


def test_every_change_of_view_lands_in_the_url_and_survives_a_reload(server, page):
    page.goto(f"{server}/run/{RUN}?ref={REFERENCE}&smooth=0.9")
    wait_for_panel(page, "loss")
    page.get_by_label("y range includes the start").check()
    page.wait_for_function("location.search.includes('y=all')", timeout=30_000)
    assert query(page) == {"ref": REFERENCE, "smooth": "0.9", "y": "all"}
    page.locator("button#show-all").click()  # no range yet: the URL stays as it is
    page.reload()
    wait_for_panel(page, "loss")
    assert page.get_by_label("y range includes the start").is_checked()
    y_range = page.evaluate(f"{panel_js('heldout')}._fullLayout.yaxis.range")
    assert max(y_range) > 8  # the start is in: a held-out loss of ~11 at step 0
    smoothed = [t for t in traces(page, "loss") if t["name"].endswith("(smoothed)")]
    assert len(smoothed) == 2  # the smoothing came back from the URL
    assert not page.errors, page.errors


def test_an_alert_link_opens_its_range_in_the_same_view(server, page):
    page.goto(f"{server}/run/{RUN}?ref={REFERENCE}&smooth=0.9")
    wait_for_panel(page, "loss")
    link = page.locator("li.alert a.alert-link").first
    link.wait_for(timeout=30_000)
    # Grouped as the watch service would alert: a few dozen rows, not the ~260 detections, and the
    # periodic evaluation pauses one row that counts them.
    assert page.locator("li.alert").count() <= 40
    stalls = page.locator("li.alert", has_text="steps slowed down or stalled")
    assert stalls.count() == 1
    times = re.match(r"([\d,]+) times in \d+ episodes", stalls.locator(".message").inner_text())
    assert times and int(times.group(1).replace(",", "")) > 100, stalls.inner_text()
    link.click()
    page.wait_for_function("location.search.includes('start=')", timeout=30_000)
    q = query(page)
    assert q["ref"] == REFERENCE and q["smooth"] == "0.9" and int(q["start"]) <= int(q["end"])
    wait_for_panel(page, "loss")
    page.wait_for_function(f"(() => {{ const r = {panel_js('loss')}._fullLayout.xaxis.range;"
                           f" return r[0] <= {q['start']} && r[1] >= {q['end']}; }})()", timeout=30_000)
    assert page.locator("#ref-select").inner_text().strip().startswith(REFERENCE)
    screenshot(page, "real-pair-alert-link")
    assert not page.errors, page.errors
