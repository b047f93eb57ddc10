"""`gapwatch report` against real stores: formats, outputs, defaults, and one-line errors."""

from __future__ import annotations

import json
import os
import stat

import pytest

from monitor.store import open_store

from app.cli import main


@pytest.fixture
def stored_pair(synthetic, store_run):
    """A store (URL) holding a run that diverges below its recorded reference."""

    def make(url: str) -> str:
        with open_store(url) as store:
            store_run(store, synthetic(name="ref", seed=2, steps=1500))
            store_run(store, synthetic(name="run", seed=1, steps=1500, train_shift=-0.2, shift_from=1001),
                      reference="ref")
        return url

    return make


def test_each_format_from_its_suffix(stored_pair, sqlite_url, tmp_path):
    url = stored_pair(sqlite_url)
    for name in ("r.html", "r.md", "r.json"):
        assert main(["report", "--run", "run", "--store", url, "-o", str(tmp_path / name)]) == 0
    html = (tmp_path / "r.html").read_text()
    # Train loss below the reference while held-out loss stays tied: the memorization signature.
    assert html.startswith("<!DOCTYPE html>") and "Memorization suspected" in html
    assert (tmp_path / "r.md").read_text().startswith("## gapwatch report: run vs ref")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["reference"] == "ref"  # the reference recorded with the run
    assert doc["verdict"]["kind"] == "memorization_suspected"
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temporary file, which is gone
    # A file to share: readable by others as the umask allows (022 here), not the owner's alone.
    old = os.umask(0o022)
    try:
        assert main(["report", "--run", "run", "--store", url, "-o", str(tmp_path / "shared.md")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "shared.md").stat().st_mode) == 0o644


def test_report_from_postgresql(stored_pair, pg_url, capsys):
    url = stored_pair(pg_url)
    assert main(["report", "--run", "run", "--reference", "ref", "--store", url, "--format", "json", "-o", "-",
                 "--windows", "3", "--gpus", "16", "--pue", "1.1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["tables"]["train_delta"]["rows"]) == 3
    energy = {r["run"]: r for r in doc["tables"]["energy"]["rows"]}
    assert energy["run"]["gpus"] == 16
    hours = energy["run"]["compute_hours"]
    assert hours == pytest.approx(1500 * 0.5 / 3600, rel=0.01)
    assert energy["run"]["energy_kwh"] == pytest.approx(0.7 * 16 * hours * 1.1)
    assert doc["parameters"]["energy"]["pue"] == 1.1


def test_default_html_output_goes_to_report_html(stored_pair, sqlite_url, tmp_path, monkeypatch):
    url = stored_pair(sqlite_url)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--run", "run", "--store", url, "--no-figures"]) == 0
    html = (tmp_path / "report.html").read_text()
    assert "<figure" not in html and "Plotly" not in html


@pytest.mark.parametrize("argv, message", [
    (["--run", "nope"], "no run named 'nope' in sqlite:///"),
    (["--run", "run", "--reference", "run"], "run 'run' cannot be its own reference"),
    (["--run", "run", "--reference", "ghost"], "reference 'ghost' of 'run' is not in sqlite:///"),
    (["--run", "run", "--pue", "0.9"], "PUE is total over IT energy and cannot be below 1"),
    (["--run", "run", "--carbon-intensity", "nan"], "carbon_intensity_kg_per_kwh must be a finite number"),
    (["--run", "run", "--windows", "0"], "--windows must be at least 1"),
    (["--run", "run", "-o", "/nonexistent/dir/r.html"], "folder /nonexistent/dir does not exist"),
])
def test_user_errors_end_in_one_line(stored_pair, sqlite_url, capsys, argv, message):
    url = stored_pair(sqlite_url)
    assert main(["report", "--store", url, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gapwatch report: error: ") and message in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_missing_store_is_one_line(tmp_path, capsys):
    assert main(["report", "--run", "a", "--store", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gapwatch report: error:")
