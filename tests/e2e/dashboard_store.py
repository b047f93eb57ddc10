"""A store with a realistic run and its reference, for the dashboard's tests and screenshots.

Seeded synthetic series shaped like a pre-training run: a power-law loss with per-step noise and
spikes shared with the reference (same data order), a run whose train loss drifts below its
reference late while held-out loss stays tied (the memorization signature gapwatch exists for),
grad-norm spikes, a throughput stall, data-loader cursor and coverage, checkpoints, a restart that
logs a few steps twice, detections and alerts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import insert

from monitor.schema import (
    DATA_CURSOR,
    DATA_EPOCH,
    DATA_EXPECTED_UNIQUE_FRACTION,
    DATA_SEEN_2PLUS_FRACTION,
    DATA_SEEN_ONCE_FRACTION,
    DATA_UNIQUE_FRACTION,
    PERF_MFU,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    SPIKE_SCORE_GRAD_NORM,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    Detection,
    Severity,
    downstream_key,
    heldout_key,
)
from monitor.alerting.grouping import group
from monitor.alerting.ledger import stored_alerts
from monitor.jsonutil import dumps
from monitor.store import Store, open_store, tables

GLOBAL_BATCH = 64
SEQ_LEN = 1024
TOKENS_PER_STEP = GLOBAL_BATCH * SEQ_LEN
RECORDS_PER_EPOCH = GLOBAL_BATCH * 2000


@dataclass
class DemoRuns:
    run: str
    reference: str
    steps: int
    spike_steps: tuple[int, ...]
    stall_steps: tuple[int, int]
    restart_step: int
    drift_start: int


def loss_curve(steps: np.ndarray, rng: np.random.Generator, shared_noise: np.ndarray) -> np.ndarray:
    base = 2.6 + 8.5 * (steps + 40.0) ** -0.35
    return base + shared_noise + rng.normal(0, 0.012, len(steps))


def build(url: str, *, steps: int = 3000, run: str = "olmo-repro", reference: str = "olmo-reference",
          seed: int = 0, alerts: bool = True, eval_every: int = 250) -> DemoRuns:
    rng = np.random.default_rng(seed)
    s = np.arange(steps)
    shared = rng.normal(0, 0.02, steps)
    shared_spikes = np.sort(rng.choice(np.arange(100, steps), size=max(1, steps // 800), replace=False))
    shared[shared_spikes] += 0.6
    drift_start = int(steps * 0.55)
    drift = np.clip((s - drift_start) / (steps - drift_start), 0, 1) * -0.12
    ref_loss = loss_curve(s, rng, shared)
    run_loss = loss_curve(s, rng, shared) + drift
    grad = 0.28 + 0.6 * np.exp(-s / 300) + np.abs(rng.normal(0, 0.03, steps))
    spike_steps = tuple(int(x) for x in np.linspace(steps * 0.3, steps * 0.85, 3).astype(int))
    grad[list(spike_steps)] = [1.4, 2.0, 1.7]
    stall = (int(steps * 0.62), int(steps * 0.62) + 12)
    step_time = 0.52 + rng.normal(0, 0.01, steps)
    step_time[stall[0]:stall[1]] = 3.5
    tokens_per_s = TOKENS_PER_STEP / step_time
    mfu = 0.41 * 0.52 / step_time
    cursor = (s + 1) * GLOBAL_BATCH
    epoch = cursor // RECORDS_PER_EPOCH
    seen = cursor / RECORDS_PER_EPOCH
    unique = 1 - np.exp(-seen)
    once = seen * np.exp(-seen)
    spike_score = pd.Series((grad > 1.0).astype(float)).rolling(1000, min_periods=1).mean().to_numpy()

    with open_store(url) as store:
        store.ensure_run(reference, project="demo", tokens_per_step=TOKENS_PER_STEP,
                         config={"global_batch_size": GLOBAL_BATCH, "records_per_epoch": RECORDS_PER_EPOCH},
                         status="finished")
        store.ensure_run(run, project="demo", tokens_per_step=TOKENS_PER_STEP, reference=reference,
                         config={"global_batch_size": GLOBAL_BATCH, "records_per_epoch": RECORDS_PER_EPOCH})
        now = time.time()
        wall = now - (steps - s) * 0.5
        _write(store, reference, s, {TRAIN_LOSS: ref_loss}, wall)
        restart = int(steps * 0.7)
        dense = {TRAIN_LOSS: run_loss, TRAIN_GRAD_NORM: grad, PERF_STEP_TIME_S: step_time,
                 PERF_TOKENS_PER_S: tokens_per_s, PERF_MFU: mfu, DATA_CURSOR: cursor.astype(float),
                 DATA_EPOCH: epoch.astype(float), DATA_UNIQUE_FRACTION: unique, DATA_SEEN_ONCE_FRACTION: once,
                 DATA_SEEN_2PLUS_FRACTION: unique - once, DATA_EXPECTED_UNIQUE_FRACTION: np.minimum(seen, 1.0)}
        _write(store, run, s, dense, wall)
        # A detector's series, stored where the watch service stores it: apart from the logged rows.
        store.write_derived(run, pd.DataFrame({"step": s, "key": SPIKE_SCORE_GRAD_NORM, "value": spike_score}))
        # A restart from the checkpoint 20 steps back: those steps are logged again by attempt 2.
        again = s[restart - 20:restart]
        _write(store, run, again, {TRAIN_LOSS: run_loss[again] + rng.normal(0, 0.002, len(again))},
               wall[again] + 30, attempt=2)
        evals = np.arange(eval_every, steps, eval_every)
        for name, loss in ((reference, ref_loss), (run, run_loss - drift)):
            rows = {}
            for dataset, offset in (("c4_en", 0.05), ("wikitext_103", -0.12)):
                rows[heldout_key(dataset, "loss")] = loss[evals] + offset + rng.normal(0, 0.004, len(evals))
                rows[heldout_key(dataset, "stderr")] = np.full(len(evals), 0.006)
            for task, level in (("hellaswag", 0.30), ("arc_easy", 0.45), ("piqa", 0.6)):
                acc = level + 0.25 * (1 - np.exp(-evals / steps * 3)) + rng.normal(0, 0.01, len(evals))
                rows[downstream_key(task, "acc")] = acc
                rows[downstream_key(task, "acc", "stderr")] = np.sqrt(acc * (1 - acc) / 1000)
            _write(store, name, evals, rows, wall[evals])
        checkpoints = np.arange(250, steps, 250)
        store.write_events(run, [{"step": int(c), "kind": "checkpoint", "payload": {"path": f"ckpt/{c}"}}
                                 for c in checkpoints])
        store.write_events(run, [
            {"step": restart, "kind": "restart", "payload": {"reason": "node failure"}, "attempt": 2},
            {"step": restart - 20, "kind": "resume", "attempt": 2,
             "payload": {"restored_step": restart - 20, "restored_data_position": (restart - 20) * GLOBAL_BATCH}},
        ])
        detections = [
            Detection(run, "spike", TRAIN_GRAD_NORM, p, p, p, 6.5, Severity.WARNING,
                      f"grad norm spike at step {p}", {"z": 6.5}) for p in spike_steps
        ] + [
            Detection(run, "throughput", PERF_STEP_TIME_S, stall[0], stall[1] - 1, stall[0] + 3, 6.7,
                      Severity.WARNING, "step time 6.7x the ideal", {"ideal_s": 0.52}),
            Detection(run, "reference_divergence", TRAIN_LOSS, drift_start + (steps - drift_start) // 3, steps - 1,
                      steps - 50, 2.4, Severity.CRITICAL, "train/loss 0.09 below the reference", {"delta": -0.09},
                      reference=reference),
        ]
        store.write_detections(detections)
        if alerts:
            add_alert(store, run, "reference_divergence", TRAIN_LOSS, "critical",
                      drift_start + (steps - drift_start) // 3, steps - 1, "train/loss 0.09 below the reference",
                      evidence={"delta": -0.09, "direction": "below"})
            add_alert(store, run, "spike", TRAIN_GRAD_NORM, "warning", spike_steps[1], spike_steps[1],
                      f"grad norm spike at step {spike_steps[1]}", state="resolved")
    return DemoRuns(run=run, reference=reference, steps=steps, spike_steps=spike_steps, stall_steps=stall,
                    restart_step=restart, drift_start=drift_start)


def _write(store: Store, run: str, steps: np.ndarray, series: dict[str, np.ndarray], wall: np.ndarray,
           attempt: int = 1) -> None:
    """Each series is aligned with `steps`."""
    frames = [pd.DataFrame({"step": steps, "key": key, "value": np.asarray(values, dtype=float),
                            "wall_time": wall, "attempt": attempt})
              for key, values in series.items()]
    store.write_metrics(run, pd.concat(frames, ignore_index=True))


def add_alert(store: Store, run: str, detector: str, metric: str, severity: str, start: int, end: int,
              message: str, state: str = "open", evidence: dict | None = None) -> None:
    """An alert row written straight into the alerts table, as the watch service would: its story
    and members (which name it) come from the watch service's own tracker, and it is the next
    episode of its story on the run."""
    finding = Detection(run, detector, metric, start, end, end, 2.0, Severity(severity), message, evidence or {})
    (incident,) = group([finding])
    incident.alert.episode = 1 + sum(a.story == incident.alert.story for a in stored_alerts(store, run))
    now = time.time()
    run_id = store.run_id(run)  # before the write transaction: a second connection would wait on it
    with store.engine.begin() as conn:
        conn.execute(insert(tables.alerts).values(
            run_id=run_id, attempt=1, detector=detector, metric=metric, state=state, severity=severity,
            start_step=start, end_step=end, peak_step=end, score=2.0, message=message, evidence=dumps(evidence or {}),
            opened_at=now, updated_at=now, resolved_at=now if state == "resolved" else None,
            story=incident.alert.story, members=dumps(incident.alert.members_to_dict()),
        ))
