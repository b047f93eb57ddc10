"""A newcomer's import format, as docs/architecture.md walks through it: one module declaring a
`Format` (its name, how it knows its files, its reader), registered by one line in `FORMATS`, then
found by detection, imported through `gapwatch import` into a store and judged by `gapwatch detect`.
Nothing else names it."""

from __future__ import annotations

import json
import math

import pytest

import monitor.importers
from app.cli import main
from monitor.errors import GapwatchError
from monitor.importers import ImportedRun, detect_format, scalars_frame
from monitor.importers.formats import Format
from monitor.store import open_store


# --- the module a newcomer writes: a toy trainer's log, `step=12 loss=2.5` a line ----------------
def read_toy(source, options) -> ImportedRun:
    steps, values = [], []
    for line in open(source, encoding="utf-8"):
        fields = dict(pair.split("=") for pair in line.split())
        steps.append(int(fields["step"]))
        values.append(float(fields["loss"]))
    return ImportedRun(name_hint="toy", source=str(source),
                       scalars=scalars_frame(steps, ["train/loss"] * len(steps), values))


TOY = Format("toy-log", read_toy, lambda probe: probe.suffix == ".toylog",
             profile="gapwatch", own_keys=True)


# ----------------------------------------------------------------------------------------------
@pytest.fixture
def registered(monkeypatch):
    # The one registry line a new format adds (monitor/importers/__init__.py), for this test only.
    monkeypatch.setattr(monitor.importers, "FORMATS", [*monitor.importers.FORMATS, TOY])


def _log(tmp_path, nan_at: int | None):
    path = tmp_path / f"run-{nan_at}.toylog"
    loss = [3.0 + 2.0 * math.exp(-s / 100) if s != nan_at else math.nan for s in range(1, 401)]
    path.write_text("".join(f"step={s} loss={v}\n" for s, v in zip(range(1, 401), loss)))
    return path


def test_detection_finds_it_only_once_registered(tmp_path, monkeypatch):
    path = _log(tmp_path, None)
    with pytest.raises(GapwatchError, match="unrecognised format"):
        detect_format(path)
    monkeypatch.setattr(monitor.importers, "FORMATS", [*monitor.importers.FORMATS, TOY])
    assert detect_format(path) == "toy-log"


def test_gapwatch_import_stores_it_and_detect_judges_it(registered, tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["import", str(_log(tmp_path, 300)), "--run", "toy", "--store", url]) == 0
    assert "created run 'toy'" in capsys.readouterr().err
    with open_store(url, read_only=True) as store:
        loss = store.load_run("toy").series("train/loss")
    assert len(loss) == 400 and math.isnan(loss[300]) and loss[1] == pytest.approx(5.0 - 0.0199, abs=1e-3)
    assert main(["detect", "--run", "toy", "--store", url, "--json", "--no-write"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert any(d["detector"] == "nonfinite" and d["start_step"] == 300 for d in found)


def test_a_clean_toy_run_has_no_critical_finding(registered, tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["import", str(_log(tmp_path, None)), "--run", "clean", "--store", url]) == 0
    capsys.readouterr()
    assert main(["detect", "--run", "clean", "--store", url, "--json", "--no-write"]) == 0
    assert not [d for d in json.loads(capsys.readouterr().out) if d["severity"] == "critical"]
