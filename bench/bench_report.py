"""The offline report for two 1.41M-step runs: time per phase, and its charts against the naive
report that puts every point of every series into the HTML.

Two synthetic runs (one diverging below the other late in training, as the reference reproduction
did) with 10 dense metrics a step (train loss, grad norm, tokens, step time, tokens/s, MFU, data
cursor and epoch, ...), held-out loss on two sets every 1,000 steps and three downstream tasks.
The phases are timed as `gapwatch report` runs them after loading: alignment for the tables,
detection (monitor.judging.judge.judge, run against reference and reference alone), tables and
verdict, charts, rendering. Side by side: the same report with each chart series thinned to
2,000 points (ours) and with every point (naive), compared by HTML size, build time, and the
time headless Chromium takes to load and draw it. Loading from the store is measured apart, on
one 1.41M-step series, since it is the store's cost and not the report's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from bench.results import record, table
from monitor import schema
from monitor.schema import RunData, RunInfo
from monitor.store import open_store

from app.report import build_report, compare, render_html, render_json, render_markdown
from app.report.build import ReportConfig
from app.report.figures import FigureConfig

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# The naive report's charts can take minutes to draw; past this the measurement says "more than".
DRAW_TIMEOUT_S = 90


def synthetic_run(name: str, steps: int, seed: int, shift: float = 0.0) -> RunData:
    """A long run: loss curve with per-step noise, dense perf and data metrics, sparse evals."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, steps + 1)
    loss = 2.3 + 3.0 * (s / 1000.0 + 1) ** -0.3 + rng.normal(0, 0.03, steps)
    loss[s > int(steps * 0.65)] += shift
    step_time = 0.5 + rng.gamma(2.0, 0.002, steps)
    cols = {
        schema.TRAIN_LOSS: loss,
        schema.TRAIN_GRAD_NORM: 0.3 * np.exp(rng.normal(0, 0.05, steps)),
        schema.TRAIN_TOKENS: s * 4096.0,
        schema.OPTIM_LR: np.minimum(s / 2000.0, 1.0) * 3e-4,
        schema.PERF_STEP_TIME_S: step_time,
        schema.PERF_TOKENS_PER_S: 4096.0 / step_time,
        schema.PERF_MFU: 0.2 / step_time,
        schema.DATA_CURSOR: s * 8.0,
        schema.DATA_EPOCH: np.floor(s * 8.0 / 4e6),
        schema.DATA_UNIQUE_FRACTION: np.minimum(s * 8.0 / 4e6, 1.0),
    }
    frame = pd.DataFrame(cols, index=pd.Index(s, name="step", dtype="int64"))
    ev = s[s % 1000 == 0]
    for name_, offset in (("c4", 0.1), ("wikitext", 0.5)):
        frame.loc[ev, schema.heldout_key(name_, "loss")] = (2.4 + offset + 3.0 * (ev / 1000.0 + 1) ** -0.3
                                                             + rng.normal(0, 0.003, ev.size))
        frame.loc[ev, schema.heldout_key(name_, "stderr")] = 0.003
    ds = s[s % 5000 == 0]
    for task in ("hellaswag", "arc_easy", "piqa"):
        frame.loc[ds, schema.downstream_key(task, "acc")] = 0.6 - 0.3 * (ds / 1000.0 + 1) ** -0.3 + rng.normal(0, 0.005, ds.size)
        frame.loc[ds, schema.downstream_key(task, "acc", "stderr")] = 0.005
    info = RunInfo(name=name, tokens_per_step=4096.0, global_batch_size=8,
                   config={"num_devices": 8, "global_batch_size": 8})
    return RunData(info=info, scalars=frame.astype("float64"))


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started


def draw_seconds(html: str) -> str:
    """Seconds from opening the file in headless Chromium until every chart has drawn its SVG."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        path.write_text(html, encoding="utf-8")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            started = time.perf_counter()
            try:
                page.goto(path.as_uri(), wait_until="load", timeout=DRAW_TIMEOUT_S * 1000)
                page.wait_for_function(
                    "document.querySelectorAll('.js-plotly-plot .main-svg').length >= "
                    "document.querySelectorAll('.js-plotly-plot').length",
                    timeout=DRAW_TIMEOUT_S * 1000)
                result = f"{time.perf_counter() - started:.1f}"
            except PlaywrightTimeout:
                result = f"> {DRAW_TIMEOUT_S}"
            browser.close()
    return result


def store_load(steps: int) -> dict:
    """load_run of one series of `steps` rows from SQLite, against the raw driver's fetch."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/store.db"
        values = np.random.default_rng(3).normal(3.0, 0.03, steps)
        with open_store(url) as store:
            store.ensure_run("long")
            for lo in range(0, steps, 200_000):
                hi = min(steps, lo + 200_000)
                store.write_metrics("long", pd.DataFrame({"step": np.arange(lo, hi), "key": schema.TRAIN_LOSS,
                                                          "value": values[lo:hi]}))
            run, t_load = timed(store.load_run, "long")
            with store.engine.connect() as conn:
                cursor = conn.connection.dbapi_connection.cursor()
                _, t_raw = timed(lambda: cursor.execute(
                    "SELECT step, attempt, value FROM metrics ORDER BY key_id, step, attempt").fetchall())
    return {"rows": f"{steps:,}", "load_run s": f"{t_load:.1f}", "raw sqlite3 fetchall s": f"{t_raw:.1f}",
            "load_run / raw": f"{t_load / t_raw:.1f}x", "points loaded": f"{len(run.scalars):,}"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_report")
    parser.add_argument("--quick", action="store_true", help="200k steps instead of 1.41M")
    args = parser.parse_args(argv)
    steps = 200_000 if args.quick else 1_410_000

    print(f"two runs of {steps:,} steps", flush=True)
    run = synthetic_run("run", steps, seed=1, shift=-0.1)
    ref = synthetic_run("reference", steps, seed=2)
    marks = {}

    def progress(message: str) -> None:
        marks[message.strip()] = time.perf_counter()
        print(f"  {message}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    pair = compare(run, ref, progress=progress)
    t_compare = time.perf_counter() - started
    judge_run = next(v for k, v in marks.items() if k.startswith("judging run"))
    judge_ref = next(v for k, v in marks.items() if k.startswith("judging reference"))
    config = ReportConfig()
    no_figures = replace(config, with_figures=False)
    report_tables, t_tables = timed(build_report, pair, no_figures)
    report, t_build = timed(build_report, pair, config)
    html, t_html = timed(render_html, report)
    _, t_md = timed(render_markdown, report)
    _, t_json = timed(render_json, report)
    naive_config = replace(config, figures=FigureConfig(max_points=10 * steps))
    naive, t_naive_build = timed(build_report, pair, naive_config)
    naive_html, t_naive_html = timed(render_html, naive)
    print("drawing both in Chromium", flush=True)
    draw_ours = draw_seconds(html)
    draw_naive = draw_seconds(naive_html)
    print("store load", flush=True)
    load = store_load(steps)

    phases = [
        {"phase": "align for the tables", "s": f"{judge_run - started:.1f}"},
        {"phase": "detect: run against reference (judge, with its own alignment)", "s": f"{judge_ref - judge_run:.1f}"},
        {"phase": "detect: reference on its own", "s": f"{started + t_compare - judge_ref:.1f}"},
        {"phase": "tables and verdict", "s": f"{t_tables:.1f}"},
        {"phase": "charts", "s": f"{max(t_build - t_tables, 0):.1f}"},
        {"phase": "render HTML / Markdown / JSON", "s": f"{t_html:.2f} / {t_md:.2f} / {t_json:.2f}"},
        {"phase": "**total after loading (HTML)**", "s": f"**{t_compare + t_build + t_html:.1f}**"},
    ]
    dense = int((run.scalars.notna().mean() > 0.99).sum())
    n_points = sum(len(tr.x) for f in report.figures for tr in f.figure.data if getattr(tr, "x", None) is not None)
    n_naive = sum(len(tr.x) for f in naive.figures for tr in f.figure.data if getattr(tr, "x", None) is not None)
    side = [
        {"report": "ours (≤ 2,000 points a series)", "points in charts": f"{n_points:,}",
         "HTML MB": f"{len(html.encode()) / 1e6:.1f}", "charts + render s": f"{t_build - t_tables + t_html:.1f}",
         "Chromium load + draw s": draw_ours},
        {"report": "naive (every point)", "points in charts": f"{n_naive:,}",
         "HTML MB": f"{len(naive_html.encode()) / 1e6:.1f}",
         "charts + render s": f"{t_naive_build - t_tables + t_naive_html:.1f}", "Chromium load + draw s": draw_naive},
    ]
    record(
        "report",
        f"Report: two {steps:,}-step runs",
        f"Verdict: {report.verdict.headline}. Phases of `gapwatch report` after loading "
        f"({dense} metrics logged every step and {len(run.scalars.columns) - dense} eval metrics a run, "
        f"{len(report.figures)} charts):\n\n" + table(phases)
        + "\n\nCharts side by side (the same report; naive puts every point in the HTML):\n\n" + table(side)
        + "\n\nLoading from the store (SQLite), one series, against the raw driver:\n\n" + table([load]),
    )


if __name__ == "__main__":
    main()
