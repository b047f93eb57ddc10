"""Helpers for the dashboard's browser tests: a real `gapwatch dashboard` process and Chromium.

The server runs as the user runs it (`python -m app dashboard`), on a free loopback port; the
browser is Debian's Chromium driven by Playwright (never a downloaded one).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-output" / "screenshots"
# A cold start imports dash, pandas and SQLAlchemy: a few seconds, more on a busy 2-core machine.
START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dashboard_process(store_url: str, *, host: str = "127.0.0.1", poll_s: float = 0.5, env: dict | None = None):
    """Run `gapwatch dashboard` until the block ends; yields (base URL on 127.0.0.1, Popen)."""
    port = free_port()
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "dashboard", "--store", store_url, "--host", host, "--port", str(port),
         "--poll", str(poll_s)],
        cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"dashboard exited with {proc.returncode}: {proc.stdout.read()}")
            try:
                urllib.request.urlopen(base + "/", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # it answers (401 when authentication is on)
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("dashboard did not start listening in time") from None
                time.sleep(0.2)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def trace_js(uid: str) -> str:
    """JS expression: the x values (as a plain array) of the trace with this uid in any graph."""
    return (
        "(() => { for (const gd of document.querySelectorAll('.js-plotly-plot')) {"
        "  const i = (gd._fullData || []).findIndex(t => t.uid === %r);"
        "  if (i >= 0) { return Array.from(gd._fullData[i].x); } } return null; })()" % uid
    )


def panel_js(name: str) -> str:
    """JS expression: the plotly graph div of a panel of the run page."""
    return ("(() => { const el = document.getElementById(JSON.stringify({name: %r, type: 'panel'}));"
            " return el && el.querySelector('.js-plotly-plot'); })()" % name)


def wait_for_panel(page, name: str, timeout_ms: int = 60_000) -> None:
    page.wait_for_function(f"(() => {{ const gd = {panel_js(name)}; return gd && gd._fullData && gd._fullData.length > 0; }})()",
                           timeout=timeout_ms)


def follow_link(page, link, path: str, tries: int = 3) -> None:
    """Click `link` and wait until the page's URL holds `path`. The overview redraws its table at
    every poll (twice a second here): a click that lands while a row is replaced is lost, so it is
    made again, up to `tries` times, and the error then says the page never left."""
    for _ in range(tries):
        link.click()
        try:
            page.wait_for_url(f"**{path}*", timeout=10_000)
            return
        except PlaywrightTimeoutError:
            continue
    raise AssertionError(f"{tries} clicks on the link left the page at {page.url}, not {path}")


def drag_zoom(page, panel: str, x0: float, x1: float) -> None:
    """Zoom a panel by dragging the mouse from data x0 to data x1 across the middle of its plot
    area, as a person does (a zoom set from JavaScript is not applied by Dash 4.4)."""
    box = page.evaluate(
        f"""(() => {{ const gd = {panel_js(panel)}; const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const r = gd.getBoundingClientRect();
            return {{left: r.left + xa._offset, top: r.top + ya._offset, height: ya._length,
                     p0: xa.l2p({x0}), p1: xa.l2p({x1})}}; }})()"""
    )
    y = box["top"] + box["height"] / 2
    page.mouse.move(box["left"] + box["p0"], y)
    page.mouse.down()
    page.mouse.move(box["left"] + (box["p0"] + box["p1"]) / 2, y, steps=5)
    page.mouse.move(box["left"] + box["p1"], y, steps=5)
    page.mouse.up()


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
