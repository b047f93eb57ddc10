"""The held-out delta panel draws what the held-out detector judged: run − reference at its
checkpoints with the band a finding had to clear, on a real pair (modded-nanogpt's Muon against
AdamW at 1.5B, whose held-out losses sit a few hundredths of a nat apart on curves that fall by 19)."""

from __future__ import annotations

import numpy as np
import pytest

from app.cli import main
from app.dashboard import panels, queries
from app.dashboard.routes import ViewSpec
from monitor.store import open_store

SCALEUP = "runs/modded-nanogpt/scaleup1b_2024-10-20"


@pytest.fixture(scope="module")
def url(shared_data, tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('heldout-delta') / 'store.db'}"
    folder = shared_data / SCALEUP
    assert main(["import", str(next(folder.glob("87bd51fd*.txt"))), "--run", "adamw", "--store", url]) == 0
    assert main(["import", str(next(folder.glob("ad8d7ae5*.txt"))), "--run", "muon", "--reference", "adamw",
                 "--store", url]) == 0
    assert main(["detect", "--run", "muon", "--store", url]) == 0
    return url


def test_the_panel_draws_the_finding_s_own_delta_and_band(url):
    with open_store(url, read_only=True) as store:
        finding = next(d for d in store.read_detections("muon") if d.detector == "heldout_divergence")
        rendered = panels.build(queries.load_view(store, ViewSpec(run="muon"), 2000, None))
    fig = rendered.figures["heldout_delta"]
    line = next(t for t in fig.data if (t.name or "").endswith("(median over sets)"))
    band = next(t for t in fig.data if t.name == "held-out divergence threshold")
    at = list(np.asarray(line.x, dtype=float)).index(float(finding.peak_step))
    assert float(line.y[at]) == pytest.approx(finding.evidence["delta"])
    assert -float(band.y[at]) == pytest.approx(finding.evidence["band"])


def test_without_a_reference_the_panel_is_left_out_and_says_why(url):
    with open_store(url, read_only=True) as store:
        rendered = panels.build(queries.load_view(store, ViewSpec(run="adamw"), 2000, None))
    assert rendered.left_out["heldout_delta"] == "no reference run"
    assert "held-out loss delta (no reference run)" in rendered.left_out_line()
