"""A newcomer's detector, as docs/architecture.md walks through it: one class with its parameters
as documented fields, registered by one line, judged through `gapwatch detect` like the built-in ones
(stored, printed, and silent on a clean run)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from app.cli import main
from monitor.detectors import REGISTRY, Detector, ReferenceUse
from monitor.schema import TRAIN_LOSS, Detection, RunData, Severity
from monitor.store import open_store


@dataclass
class LossCeiling(Detector):
    """Train loss above a fixed ceiling: the smallest detector that follows the contract."""

    name: ClassVar[str] = "loss_ceiling"
    reference_use: ClassVar[ReferenceUse] = ReferenceUse.NONE

    ceiling: float = 5.0
    """Loss above this is flagged; a test value, not a calibrated one."""

    def columns(self, run: RunData) -> list[str]:
        return [TRAIN_LOSS]

    def detect(self, run: RunData, reference: RunData | None = None) -> list[Detection]:
        loss = run.series(TRAIN_LOSS)
        high = loss[loss > self.ceiling]
        if high.empty:
            return []
        peak = int(high.idxmax())
        return [Detection(run.info.name, self.name, TRAIN_LOSS, int(high.index[0]), int(high.index[-1]), peak,
                          float(high.max() / self.ceiling), Severity.WARNING,
                          f"train/loss {high.max():.2f} above the ceiling {self.ceiling}",
                          {"ceiling": self.ceiling, "max": float(high.max())})]

    def explain(self, run: RunData, reference: RunData | None = None) -> pd.DataFrame:
        loss = run.series(TRAIN_LOSS)
        return pd.DataFrame({"step": loss.index, "loss": loss.to_numpy(), "ceiling": self.ceiling,
                             "flagged": (loss > self.ceiling).to_numpy()})


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
        ("loss_ceiling", 120, 124, "warning")]
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
