"""Synthetic runs for the report's tests: a smooth loss curve with per-step noise, held-out and
downstream evals with error bars, throughput, data-loader metrics, and the faults the report must
show (a gap in train loss, a held-out shift, spikes, stalls, resumes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from monitor import schema
from monitor.schema import RunData, RunInfo, empty_events

TOKENS_PER_STEP = 4096
GLOBAL_BATCH = 8
HELDOUT_STDERR = 0.003
DOWNSTREAM_STDERR = 0.005


@dataclass
class RunSpec:
    """What a synthetic run looks like; every fault is off by default."""

    name: str
    steps: int = 3000
    seed: int = 0
    train_noise: float = 0.03
    train_shift: float = 0.0  # added to train loss from `shift_from` on
    shift_from: int = 0
    heldout_shift: float = 0.0  # added to every held-out loss
    heldout_every: int = 100
    heldout_stderr: bool = True  # log eval/heldout/<set>/stderr
    acc_shift: float = 0.0  # added to the hellaswag accuracy
    bpb_shift: float = 0.0  # added to the arc bits per byte
    grad_spikes: tuple[int, ...] = ()
    stalls: tuple[int, ...] = ()
    events: list[dict] = field(default_factory=list)
    repeats: pd.DataFrame | None = None
    data: bool = True
    tokens_per_step: int = TOKENS_PER_STEP


def make_run(spec: RunSpec) -> RunData:
    rng = np.random.default_rng(spec.seed)
    steps = np.arange(1, spec.steps + 1)
    # Curves are functions of tokens seen, so a run with twice the batch learns twice as fast per step.
    scale = spec.tokens_per_step / TOKENS_PER_STEP
    curve = 2.5 + 3.0 * np.exp(-steps * scale / 400.0)
    loss = curve + rng.normal(0, spec.train_noise, steps.size)
    loss[steps >= spec.shift_from] += spec.train_shift
    grad = 0.3 + rng.normal(0, 0.01, steps.size)
    for s in spec.grad_spikes:
        grad[s - 1] *= 6.0
    step_time = 0.5 + rng.normal(0, 0.002, steps.size)
    for s in spec.stalls:
        step_time[s - 1] = 5.0
    cols = {
        schema.TRAIN_LOSS: loss,
        schema.TRAIN_GRAD_NORM: grad,
        schema.TRAIN_TOKENS: steps * float(spec.tokens_per_step),
        schema.PERF_STEP_TIME_S: step_time,
        schema.PERF_TOKENS_PER_S: spec.tokens_per_step / step_time,
        schema.PERF_MFU: 0.4 * 0.5 / step_time,
    }
    if spec.data:
        cols[schema.DATA_CURSOR] = steps * float(GLOBAL_BATCH)
        cols[schema.DATA_EPOCH] = np.zeros(steps.size)
    frame = pd.DataFrame(cols, index=pd.Index(steps, name="step", dtype="int64"))
    ev = steps % spec.heldout_every == 0
    e_steps = steps[ev]
    e_curve = 2.6 + 3.0 * np.exp(-e_steps * scale / 400.0)
    for name, offset in (("c4", 0.0), ("wikitext", 0.4)):
        values = e_curve + offset + rng.normal(0, HELDOUT_STDERR, e_steps.size) + spec.heldout_shift
        frame.loc[e_steps, schema.heldout_key(name, "loss")] = values
        if spec.heldout_stderr:
            frame.loc[e_steps, schema.heldout_key(name, "stderr")] = HELDOUT_STDERR
    acc = 0.3 + 0.2 * (1 - np.exp(-e_steps * scale / 800.0)) + rng.normal(0, DOWNSTREAM_STDERR, e_steps.size)
    frame.loc[e_steps, schema.downstream_key("hellaswag", "acc")] = acc + spec.acc_shift
    frame.loc[e_steps, schema.downstream_key("hellaswag", "acc", "stderr")] = DOWNSTREAM_STDERR
    bpb = 1.2 - 0.3 * (1 - np.exp(-e_steps * scale / 800.0)) + rng.normal(0, DOWNSTREAM_STDERR, e_steps.size)
    frame.loc[e_steps, schema.downstream_key("arc_easy", "bpb")] = bpb + spec.bpb_shift
    frame.loc[e_steps, schema.downstream_key("arc_easy", "bpb", "stderr")] = DOWNSTREAM_STDERR
    piqa = 0.6 + rng.normal(0, DOWNSTREAM_STDERR, e_steps.size)
    frame.loc[e_steps, schema.downstream_key("piqa", "acc")] = piqa
    frame.loc[e_steps, schema.downstream_key("piqa", "acc", "stderr")] = DOWNSTREAM_STDERR
    events = pd.DataFrame(spec.events) if spec.events else empty_events()
    if spec.events:
        events["attempt"] = events.get("attempt", 1)
        events = events[["step", "kind", "attempt", "payload"]].astype({"step": "int64", "attempt": "int64"})
    info = RunInfo(name=spec.name, tokens_per_step=float(spec.tokens_per_step), global_batch_size=GLOBAL_BATCH,
                   config={"num_devices": 8, "global_batch_size": GLOBAL_BATCH, "deterministic": True})
    data = RunData(info=info, scalars=frame.astype("float64"), events=events)
    if spec.repeats is not None:
        data.repeats = spec.repeats
    return data


@pytest.fixture
def synthetic():
    """make_run(RunSpec(...)) for tests that build their own runs."""
    return lambda **kw: make_run(RunSpec(**kw))


def write_run(store, data: RunData, reference: str | None = None) -> None:
    """Store a synthetic run as a logging client would: long metric rows plus events."""
    long = data.scalars.reset_index().melt(id_vars="step", var_name="key", value_name="value").dropna()
    store.ensure_run(data.name, config=data.info.config, tokens_per_step=data.info.tokens_per_step,
                     reference=reference)
    store.write_metrics(data.name, long)
    if len(data.events):
        store.write_events(data.name, [dict(step=int(r.step), kind=r.kind, attempt=int(r.attempt), payload=r.payload)
                                       for r in data.events.itertuples(index=False)])


@pytest.fixture
def store_run():
    """write_run(store, run_data, reference=None)."""
    return write_run


TEST_OUTPUT = Path(__file__).resolve().parents[3] / "test-output"


@dataclass
class PageVisit:
    """What happened when a report was opened in the browser."""

    console_errors: list[str]
    requests: list[str]  # every URL the page asked for besides the report file itself
    dialogs: list[str]  # alert()/confirm() that fired: escaped text must never run
    plots: int  # plotly charts drawn (each with its SVG)
    title: str
    screenshot: Path


@pytest.fixture(scope="session")
def open_in_chromium(chromium):
    """open(html_path, screenshot_name) -> PageVisit, in the session's headless Chromium."""
    TEST_OUTPUT.mkdir(exist_ok=True)
    browser = chromium

    def visit(path: Path, screenshot: str) -> PageVisit:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors, requests, dialogs = [], [], []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        url = path.resolve().as_uri()
        page.goto(url, wait_until="load")
        # Every chart has drawn its SVG once plotly has run.
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= "
                               "document.querySelectorAll('.js-plotly-plot').length", timeout=60_000)
        plots = page.locator(".js-plotly-plot").count()
        shot = TEST_OUTPUT / screenshot
        page.screenshot(path=str(shot), full_page=True)
        title = page.title()
        page.close()
        return PageVisit(errors, [u for u in requests if u != url], dialogs, plots, title, shot)

    yield visit
