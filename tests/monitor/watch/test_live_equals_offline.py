"""Live equals offline: a real run with faults, each metric at its own cadence, cut into random pieces,
imported piece by piece into a real SQLite store and judged by the real watch service (restarted at a
random point, with or without the state it saved) reaches the detections and alerts `detect` reaches on
the whole run, detector by detector, and opens, names and resolves the incidents that grouping the
whole run's detections and clean verdicts gives, under the same incident ids."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from bench.quality import corpus
from monitor.alerting.config import AlertingConfig, IncidentConfig, SinkConfig
from monitor.alerting.grouping import group, marks_of, progress_from_marks
from monitor.alerting.ledger import AlertLedger
from monitor.judging.engine import DetectConfig, DetectionEngine
from monitor.schema import (
    DATA_BATCH_REREAD_FRACTION,
    DATA_CURSOR,
    DOWNSTREAM_PREFIX,
    HELDOUT_PREFIX,
    PERF_STEP_TIME_S,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    TRAIN_REREAD_LOSS_GAP,
    EventKind,
    RunData,
    Severity,
    downstream_key,
)
from monitor.store import open_store
from monitor.watch.config import WatchConfig
from monitor.watch.service import TargetSpec, WatchService

# Windows sized for a 1,530-step run, so that every detector has complete windows to judge.
PARAMS = {"spike": {"score_window": 700, "olmo2_window": 300},
          "throughput": {"block_points": 200, "baseline_blocks": 5},
          "nonfinite": {"baseline_points": 100},
          "grad_norm_growth": {"block_points": 20, "warmup_blocks": 2},
          "memorization_reread": {"window_points": 100}}
BATCH = 8
RESUME_AT = 700


def with_faults(run: RunData, faulty: bool) -> RunData:
    """A real repeat of modded-nanogpt with metrics at their own cadences: train loss and step time
    every step, grad norm and the data cursor every 10 steps, held-out loss every 125 (real),
    downstream evals every 250; and, when `faulty`, every kind of fault."""
    s = run.scalars.copy()
    steps = s.index.to_numpy()
    rng = np.random.default_rng(1 if faulty else 2)
    every10 = steps[steps % 10 == 0]
    grad = 0.3 * np.exp(rng.normal(0, 0.05, every10.size))
    s[TRAIN_GRAD_NORM] = pd.Series(grad, index=every10)
    s[DATA_CURSOR] = pd.Series(every10 * BATCH, index=every10, dtype=float)
    every250 = steps[(steps % 250 == 0) & (steps > 0)]
    for task in ("piqa", "arc_easy"):
        acc = 0.5 + 0.1 * every250 / steps[-1] + rng.normal(0, 0.002, every250.size)
        s[downstream_key(task, "acc")] = pd.Series(acc, index=every250)
        s[downstream_key(task, "acc", "n")] = pd.Series(20_000.0, index=every250)
    events = run.events
    if faulty:
        late = np.clip((steps - 500) / 400.0, 0, 1)
        s[TRAIN_LOSS] = s[TRAIN_LOSS] - 0.1 * late  # memorization: train below, held-out tied
        s.loc[1200, TRAIN_LOSS] *= 2.0  # a spike
        s.loc[1300, TRAIN_LOSS] = np.nan  # a NaN
        s.loc[steps[steps % 100 == 50], PERF_STEP_TIME_S] *= 1.5  # a periodic pause
        s.loc[1400, PERF_STEP_TIME_S] *= 40  # a stall
        growth = 1 + 2 * np.clip((every10 - 800) / 300.0, 0, 1)
        s.loc[every10, TRAIN_GRAD_NORM] = grad * growth
        s.loc[every10[every10 > RESUME_AT], DATA_CURSOR] += BATCH  # the loader resumed one batch ahead
        for task in ("piqa", "arc_easy"):  # down for two evaluations, then recovered
            key = downstream_key(task, "acc")
            s.loc[every250[(every250 >= 750) & (every250 < 1250)], key] -= 0.1
        share = np.clip((steps - 600) / 2000.0, 0, 0.5)
        s[DATA_BATCH_REREAD_FRACTION] = share
        s[TRAIN_REREAD_LOSS_GAP] = np.where(share > 0, 0.3 + rng.normal(0, 0.3, steps.size), 0.0)
        events = pd.DataFrame({"step": [RESUME_AT], "kind": [EventKind.RESUME.value], "attempt": [1],
                               "payload": [{"restored_step": RESUME_AT + 1, "restored_data_position": RESUME_AT * BATCH,
                                            "global_batch_size": BATCH}]})
    return RunData(info=run.info, scalars=s, events=events)


def offset_evaluations(run: RunData, reference: RunData) -> None:
    """Both evaluate held-out loss every other time, half an interval apart (the run's checkpoints
    then pair with mirrored differences: checkpoints.pair_series)."""
    for data, keep in ((run, 0), (reference, 1)):
        for column in [c for c in data.scalars.columns if c.startswith(HELDOUT_PREFIX)]:
            logged = data.scalars.index[data.scalars[column].notna()]
            data.scalars.loc[logged[1 - keep::2], column] = np.nan


def long_rows(data: RunData) -> pd.DataFrame:
    long = data.scalars.reset_index().melt(id_vars="step", var_name="key", value_name="value")
    logged = long["value"].notna() | ((long["key"] == TRAIN_LOSS) & (long["step"] == 1300))
    return long[logged].reset_index(drop=True)


def is_eval(key: str) -> bool:
    return key.startswith(HELDOUT_PREFIX) or key.startswith(DOWNSTREAM_PREFIX)


def config(save_every_poll: bool) -> WatchConfig:
    return WatchConfig(poll_interval_s=0.01, state_save_interval_s=0.0 if save_every_poll else 1e9,
                       detect=DetectConfig(params=PARAMS),
                       alerting=AlertingConfig(incidents=IncidentConfig(resolve_after_steps=128),
                                               sinks=[SinkConfig("console", "console", Severity.INFO)]))


def service(store, save_every_poll: bool) -> WatchService:
    return WatchService(store, config(save_every_poll), TargetSpec(runs=("run",)), stream=io.StringIO())


def key(d) -> tuple:
    return (d.detector, d.metric, d.severity.value, int(d.start_step))


def offline_alerts(whole, run: RunData) -> set[tuple]:
    """The incidents the watch service's tracker makes of the whole-run detections and clean
    verdicts (monitor/alerting/grouping.py, as `gapwatch detect` lists them)."""
    incidents = group(whole.detections, progress_from_marks("run", marks_of(run)),
                      config(True).alerting.incidents, cleans=whole.cleans)
    return {(i.incident_id, i.story, i.detector, i.metric, i.alert.severity.value, i.alert.start_step,
             "resolved" if i.resolved else "open") for i in incidents}


@settings(max_examples=12, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@pytest.mark.slow
@given(cuts=st.lists(st.integers(min_value=2, max_value=1529), min_size=2, max_size=9, unique=True),
       lag=st.sampled_from([0, 250]), restart=st.integers(min_value=0, max_value=9),
       save_every_poll=st.booleans(), offset=st.booleans())
@example(cuts=[300, 610, 1111], lag=250, restart=2, save_every_poll=False, offset=True)
def test_the_watch_service_reaches_what_detect_reaches(tmp_path_factory, shared_data, cuts, lag, restart,
                                                       save_every_poll, offset):
    base, ref = corpus.repeats("test")[:2]
    run_data, ref_data = with_faults(base, True), with_faults(ref, False)
    if offset:
        offset_evaluations(run_data, ref_data)
    url = f"sqlite:///{tmp_path_factory.mktemp('live') / 'store.db'}"
    rows = long_rows(run_data)
    evals = rows["key"].map(is_eval).to_numpy()
    last = int(rows["step"].max())
    with open_store(url) as store:
        store.ensure_run("reference", config={"global_batch_size": BATCH})
        store.write_metrics("reference", long_rows(ref_data))
        store.ensure_run("run", config={"global_batch_size": BATCH}, reference="reference")
        svc = service(store, save_every_poll)
        edges = [0, *sorted(cuts), last]
        for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
            now = rows[~evals & (rows["step"] > lo) & (rows["step"] <= hi)]
            # Evaluations land `lag` steps late (an offline eval job); the last piece brings the rest.
            top = hi - lag if hi < last else last
            due = rows[evals & (rows["step"] > lo - lag) & (rows["step"] <= top)] if i else \
                rows[evals & (rows["step"] <= top)]
            store.write_metrics("run", pd.concat([now, due], ignore_index=True))
            store.write_events("run", [{"step": int(e.step), "kind": e.kind, "payload": e.payload}
                                       for e in run_data.events.itertuples() if lo < e.step <= hi])
            if i == restart:  # the service dies here; a new one starts from what was saved
                svc = service(store, save_every_poll)
            while svc.poll():
                pass
        svc.poll()
        live = {key(d) for d in store.read_detections("run")}
        alerts = {(a.incident_id, a.story, a.detector, a.metric, a.severity.value, a.start_step, a.state)
                  for a in AlertLedger(store, AlertingConfig()).alerts("run")}
        stored = store.load_run("run")
        whole = DetectionEngine(DetectConfig(params=PARAMS)).judge(stored, store.load_run("reference"))
    offline = {key(d) for d in whole.detections}
    assert {d for d, *_ in offline} >= {"memorization", "reference_divergence", "spike", "nonfinite", "throughput",
                                        "grad_norm_growth", "data_invariants", "resume", "eval_regression",
                                        "memorization_reread"}
    assert live == offline, (sorted(live - offline), sorted(offline - live))
    assert alerts == offline_alerts(whole, stored)
    # The evals' incident resolved on their clean verdicts once they recovered, live as offline.
    assert {state for *_, detector, _, _, _, state in alerts if detector == "eval_regression"} == {"resolved"}



@pytest.mark.parametrize(("run_name", "reference_name", "pieces"),
                         [("muon-1.5b", "adamw-1.5b", 6), ("adamw-1.5b", "muon-1.5b", 11)])
def test_on_a_real_pair_the_watch_service_opens_the_incidents_detect_lists(tmp_path, shared_data, run_name,
                                                                          reference_name, pieces):
    """Muon against AdamW at 1.5B (real logs, 20,000 steps): train loss apart early, held-out loss
    apart from its first checkpoints to the end. Fed in pieces with the default settings, the watch
    service keeps one divergence incident, as grouping the whole run's findings does."""
    runs = corpus.scaleup()
    run_data, ref_data = runs[run_name], runs[reference_name]
    rows = run_data.scalars.reset_index().melt(id_vars="step", var_name="key", value_name="value").dropna()
    settings_ = WatchConfig(poll_interval_s=0.01,
                            alerting=AlertingConfig(sinks=[SinkConfig("console", "console", Severity.INFO)]))
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.ensure_run("reference")
        store.write_metrics("reference", ref_data.scalars.reset_index().melt(id_vars="step", var_name="key",
                                                                             value_name="value").dropna())
        store.ensure_run("run", reference="reference")
        svc = WatchService(store, settings_, TargetSpec(runs=("run",)), stream=io.StringIO())
        edges = np.linspace(int(rows["step"].min()) - 1, int(rows["step"].max()), pieces + 1).astype(int)
        for lo, hi in zip(edges[:-1], edges[1:]):
            store.write_metrics("run", rows[(rows["step"] > lo) & (rows["step"] <= hi)])
            while svc.poll():
                pass
        alerts = {(a.incident_id, a.name, a.state) for a in AlertLedger(store, AlertingConfig()).alerts("run")}
        stored = store.load_run("run")
        whole = DetectionEngine(DetectConfig()).judge(stored, store.load_run("reference"))
    grouped = group(whole.detections, progress_from_marks("run", marks_of(stored)), settings_.alerting.incidents,
                    cleans=whole.cleans)
    offline = set()
    for i in grouped:  # a list folds bursts at a steady period into one row; the watch alerts on each
        story, episode = i.incident_id.rsplit("#", 1)
        offline |= {(f"{story}#{n}", i.name, "resolved") for n in range(int(episode) - i.episodes + 1, int(episode))}
        offline.add((i.incident_id, i.name, "resolved" if i.resolved else "open"))
    assert alerts == offline
    assert {a for a in alerts if a[2] == "open"} == {("run:divergence#1", "held-out loss diverged from the reference",
                                                      "open")}
