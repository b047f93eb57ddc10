"""The dashboard in a real browser over a pair as wide as real runs, imported from W&B history
exports: how long the landing page takes to list both runs, how long the run page then takes to
draw every panel, and what the server's memory grows by.

The pair is bench/wide_pair.py's (101 series, a token count growing by 3,000-4,096 a step), each
run's CSV written again under W&B's `_step` header and imported with `gapwatch import`, the
reference linked with `--reference-of` on its import. The server is `gapwatch dashboard` as a user runs it; the
browser is Debian's Chromium under Playwright. Timings are wall clock from a page's navigation, and
the server's resident memory is read from /proc before the first page and after the run page.

    python -m bench.bench_wide_pages [--steps 300000] [--pair-dir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from app.dashboard.panels import PANELS
from bench.bench_end_to_end import cli, wandb_export
from bench.results import record, table
from bench.wide_pair import write_pair
from tests.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.dashboard_browser import dashboard_process, panel_js

REPO = Path(__file__).resolve().parents[1]
PAGE_TIMEOUT_MS = 120_000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def pages(url: str, runs: tuple[str, str]) -> dict:
    """Open the landing page, then the first run's page from its link, in headless Chromium."""
    from playwright.sync_api import sync_playwright

    with dashboard_process(url) as (base, proc), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1500, "height": 1000}).new_page()
        before = rss_mb(proc.pid)
        began = time.perf_counter()
        page.goto(base + "/")
        page.wait_for_function("document.querySelectorAll('a.run-link').length >= 2", timeout=PAGE_TIMEOUT_MS)
        listed_s = time.perf_counter() - began
        names = set(page.locator("a.run-link").all_inner_texts())
        began = time.perf_counter()
        page.locator("a.run-link", has_text=runs[0]).first.click()
        for panel in PANELS:  # drawn: with traces, or with the note that says why it has none
            page.wait_for_function(f"(() => {{ const gd = {panel_js(panel)}; return gd && gd._fullLayout; }})()",
                                   timeout=PAGE_TIMEOUT_MS)
        drawn_s = time.perf_counter() - began
        after = rss_mb(proc.pid)
        browser.close()
    return {"listed_s": listed_s, "both_listed": set(runs) <= names, "drawn_s": drawn_s,
            "server_mb_before": before, "server_mb_added": after - before}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_wide_pages")
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--pair-dir", type=Path, default=None, help="keep the pair's files here and reuse them")
    parser.add_argument("--quick", action="store_true", help="a 30,000-step pair")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = 30_000
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pair_dir = args.pair_dir or work / "pair"
        if not (pair_dir / "cand.csv").exists():
            print(f"writing the pair ({args.steps:,} steps)", flush=True)
            write_pair(pair_dir, args.steps)
        url = f"sqlite:///{work}/wide.db"
        imports = {}
        for name, reference_of in (("cand", None), ("ref", "cand")):
            export = wandb_export(pair_dir / f"{name}.csv", work / f"{name}-wandb.csv")
            print(f"import {export.name}", flush=True)
            extra = ("--reference-of", reference_of) if reference_of else ()
            imports[name] = cli(REPO, "import", export, "--store", url, "--run", name, *extra)[1:]
        print("pages", flush=True)
        seen = pages(url, ("cand", "ref"))
    row = {"steps": f"{args.steps:,}",
           "import ref / cand s": f"{imports['ref'][0]:.1f} / {imports['cand'][0]:.1f}",
           "import peak MB": f"{max(imports['ref'][1], imports['cand'][1]):.0f}",
           "landing page lists both runs": "yes" if seen["both_listed"] else "no",
           "landing page s": f"{seen['listed_s']:.2f}",
           "run page, every panel drawn s": f"{seen['drawn_s']:.2f}",
           "server MB before / added": f"{seen['server_mb_before']:.0f} / {seen['server_mb_added']:.0f}"}
    print(row, flush=True)
    record(f"wide_pages-{args.steps}", f"Dashboard in a browser: a pair of {args.steps:,} steps x 101 series "
           "imported from W&B history exports",
           table([row]) + "\n\nbench/bench_wide_pages.py: the pair of bench/wide_pair.py, each run's CSV under W&B's "
           "`_step` header, imported with `gapwatch import` (the reference with `--reference-of cand`); "
           "`gapwatch dashboard` as a user runs it; headless Chromium. Landing page: from navigation until both "
           "runs are listed; run page: from the click on the candidate's link until every panel is drawn (with "
           "its traces, or with the note saying why it has none). Server memory: resident set before the first "
           "page and what it added by the end. Goals (issue 27, at 300,000 steps): the landing page lists both "
           "runs, the run page draws within 3 s of it and adds <= 300 MB to the server.")


if __name__ == "__main__":
    main()
