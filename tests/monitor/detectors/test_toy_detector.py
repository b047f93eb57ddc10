"""A newcomer's detector, as docs/architecture.md walks through it: one class with its parameters
as documented fields and its declarations (story, section, verdict role), registered by one line,
judged like the built-in ones: through `gapwatch detect` (stored, printed, silent on a clean run),
through the watch service fed in pieces (one incident, one alert), in the report's verdict when it is
critical, and in the dashboard's list of findings. Nothing else names it."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from app.dashboard.queries import findings
from monitor.alerting.config import AlertingConfig, SinkConfig
from monitor.judging.engine import DetectConfig
from monitor.detectors import REGISTRY, Detector, Reads, ReferenceUse, make_run
from monitor.detectors.incremental import DEFAULT_HISTORY_POINTS, incremental
from monitor.schema import TRAIN_LOSS, Detection, RunData, Section, Severity, Story, VerdictRole
from monitor.store import open_store
from monitor.watch.config import WatchConfig
from monitor.watch.service import TargetSpec, WatchService


@dataclass
class LossCeiling(Detector):
    """Train loss above a fixed ceiling: the smallest detector that follows the contract."""

    name: ClassVar[str] = "loss_ceiling"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE
    story: ClassVar[Story] = Story.INSTABILITY
    explanation: ClassVar[str] = "train loss above its ceiling"
    shown_in: ClassVar[tuple[Section, ...]] = (Section.TRAIN,)
    verdict: ClassVar[VerdictRole] = VerdictRole(5, "loss_above_ceiling", "Train loss above its ceiling")
    reads: ClassVar[Reads] = Reads(columns=(TRAIN_LOSS,))

    ceiling: float = 5.0
    """Loss above this is flagged; a test value, not a calibrated one."""

    def detect(self, run: RunData, reference: RunData | None = None) -> list[Detection]:
        loss = run.series(TRAIN_LOSS)
        high = loss[loss > self.ceiling]
        if high.empty:
            return []
        peak = int(high.idxmax())
        return [Detection(run.info.name, self.name, TRAIN_LOSS, int(high.index[0]), int(high.index[-1]), peak,
                          float(high.max() / self.ceiling), Severity.CRITICAL,
                          f"train/loss {high.max():.2f} above the ceiling {self.ceiling}",
                          {"ceiling": self.ceiling, "max": float(high.max())})]


@pytest.fixture
def registered(monkeypatch):
    # The one registry line a new detector file adds (monitor/detectors/__init__.py), for this test only.
    monkeypatch.setitem(REGISTRY, LossCeiling.name, LossCeiling)


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    loss = np.full(300, 3.0)
    loss[120:125] = 7.5
    with open_store(url) as store:
        for name, values in (("blown", loss), ("clean", np.full(300, 3.0))):
            store.ensure_run(name)
            store.write_metrics(name, pd.DataFrame({"step": np.arange(300), "key": TRAIN_LOSS, "value": values}))
    return url


def test_a_new_detector_runs_through_gapwatch_detect(registered, store_url, capsys):
    assert main(["detect", "--run", "blown", "--store", store_url, "--detectors", "loss_ceiling", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(d["detector"], d["start_step"], d["end_step"], d["severity"]) for d in found] == [
        ("loss_ceiling", 120, 124, "critical")]
    with open_store(store_url, read_only=True) as store:
        stored = store.read_detections("blown", detector="loss_ceiling")
    assert [d.message for d in stored] == ["train/loss 7.50 above the ceiling 5.0"]


def test_the_new_detector_is_silent_on_a_clean_run(registered, store_url, capsys):
    assert main(["detect", "--run", "clean", "--store", store_url, "--detectors", "loss_ceiling", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_its_parameters_come_from_its_fields(registered):
    detector = LossCeiling(ceiling=9.0)
    assert detector.params() == {"ceiling": 9.0}
    assert LossCeiling().fingerprint() != detector.fingerprint()


def test_in_pieces_it_keeps_a_bounded_tail_without_saying_how_much():
    judge = incremental(LossCeiling())  # it did not opt in: the defaults
    state, found = judge.new_state(), []
    loss = np.full(5000, 3.0)
    loss[4000:4005] = 7.5
    for lo in range(0, 5000, 500):
        steps = np.arange(lo, lo + 500)
        state, new = judge.update(state, make_run("r", pd.DataFrame({TRAIN_LOSS: loss[steps]}, index=steps)))
        found += new
    assert len(state.tail.scalars) == DEFAULT_HISTORY_POINTS < 5000
    assert [(d.start_step, d.end_step) for d in found] == [(4000, 4004)]


def test_the_watch_service_opens_one_incident_named_by_it(registered, tmp_path):
    url = f"sqlite:///{tmp_path / 'watched.db'}"
    loss = np.full(3000, 3.0)
    loss[1200:1210] = 7.5
    config = WatchConfig(poll_interval_s=0.01, detect=DetectConfig(detectors=[LossCeiling.name]),
                         alerting=AlertingConfig(sinks=[SinkConfig("console", "console", Severity.INFO)]))
    with open_store(url) as store:
        store.ensure_run("watched")
        service = WatchService(store, config, TargetSpec(runs=("watched",)), stream=io.StringIO())
        for lo in range(0, 3000, 500):  # six pieces
            steps = np.arange(lo, lo + 500)
            store.write_metrics("watched", pd.DataFrame({"step": steps, "key": TRAIN_LOSS, "value": loss[steps]}))
            while service.poll():
                pass
        alerts = store.alerts.list("watched")
    assert [(a["detector"], a["story"], a["start_step"], a["state"]) for a in alerts] == [
        ("loss_ceiling", "instability", 1200, "resolved")]


def test_its_critical_finding_names_the_report_verdict_and_the_dashboard_lists_it(registered, store_url,
                                                                                 tmp_path, capsys):
    assert main(["detect", "--run", "blown", "--store", store_url, "--detectors", "loss_ceiling"]) == 0
    out = tmp_path / "report.json"
    assert main(["report", "--run", "blown", "--reference", "clean", "--store", store_url, "--format", "json",
                 "-o", str(out)]) == 0
    verdict = json.loads(out.read_text())["verdict"]
    assert verdict["kind"] == "loss_above_ceiling" and verdict["headline"] == "Train loss above its ceiling"
    with open_store(store_url, read_only=True) as store:
        listed = findings(store, "blown")
    assert list(listed["detector"]) == ["loss_ceiling"] and list(listed["start_step"]) == [120]
    assert list(listed["name"]) == ["train loss above its ceiling"]
    assert list(listed["incident_id"]) == ["blown:instability#1"]
