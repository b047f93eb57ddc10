"""The report's charts agree with the findings they illustrate: the held-out chart opens after the
early transient (and says so) and counts the sets it draws; the delta chart ends with a window the
detector judged, not a one-step median."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from app.cli import main
from app.report import ReportConfig, build_report, compare
from app.report.figures import HELDOUT_CLIPPED
from monitor import schema
from monitor.store import open_store

SCALEUP = "runs/modded-nanogpt/scaleup1b_2024-10-20"


def figure(report, fig_id: str):
    return next(f for f in report.figures if f.id == fig_id)


def drawn_y(fig) -> np.ndarray:
    return np.concatenate([np.asarray(t.y, dtype=float) for t in fig.data if t.showlegend is False])


def test_the_heldout_chart_opens_after_the_transient_and_says_so(synthetic):
    run, ref = synthetic(name="run", seed=1), synthetic(name="ref", seed=2)
    # An untrained model's first evaluation, as a real run logs it at step 0: 22 nats.
    for data in (run, ref):
        data.scalars.loc[100, schema.heldout_key("c4", "loss")] = 22.0
    held = figure(build_report(compare(run, ref)), "fig-heldout")
    lo, hi = held.figure.layout.yaxis.range
    late = drawn_y(held.figure)[drawn_y(held.figure) < 5]
    # The range holds every checkpoint after the transient, and not the first one's 22.
    assert hi < 6 and lo <= late.min()
    assert held.caption == HELDOUT_CLIPPED


def test_the_heldout_chart_counts_the_sets_it_draws(synthetic):
    run, ref = synthetic(name="run", seed=1), synthetic(name="ref", seed=2)
    config = ReportConfig()
    config = replace(config, figures=replace(config.figures, heldout_sets=1))
    held = figure(build_report(compare(run, ref), config), "fig-heldout")
    assert held.figure.layout.title.text.endswith(" — 1 of 2 sets")


@pytest.fixture(scope="module")
def muon(shared_data, tmp_path_factory):
    """Muon against AdamW at 1.5B (modded-nanogpt): 20,344 noisy steps each, held-out loss from an
    untrained model's 22 nats at step 0."""
    url = f"sqlite:///{tmp_path_factory.mktemp('muon') / 'store.db'}"
    folder = shared_data / SCALEUP
    assert main(["import", str(next(folder.glob("87bd51fd*.txt"))), "--run", "adamw", "--store", url]) == 0
    assert main(["import", str(next(folder.glob("ad8d7ae5*.txt"))), "--run", "muon", "--store", url]) == 0
    with open_store(url, read_only=True) as store:
        return build_report(compare(store.load_run("muon"), store.load_run("adamw")))


def test_on_a_real_pair_the_heldout_gap_behind_the_finding_is_readable(muon):
    held = figure(muon, "fig-heldout").figure
    lo, hi = held.layout.yaxis.range
    # Drawn from 0 to 22 the two runs' 0.05-nat gap was a pixel; now the range is the steady part.
    assert hi < 4 and hi - lo < 1.5


def test_on_a_real_pair_the_delta_chart_ends_on_a_judged_window(muon):
    delta = figure(muon, "fig-delta").figure
    median = next(t for t in delta.data if (t.name or "").endswith("(window median)"))
    x, y = np.asarray(median.x, dtype=float), np.asarray(median.y, dtype=float)
    # The run logs to step 20,322: the window from 20,300 holds 23 steps and is not judged. Its
    # median was drawn as an uptick of 0.2 nats at the chart's right edge.
    assert x.max() < 20_300
    assert abs(y[-1] - np.median(y[-10:])) < 0.05


def test_on_a_real_pair_the_delta_chart_opens_on_the_band_and_says_so(muon):
    item = figure(muon, "fig-delta")
    band = next(t for t in item.figure.data if t.name == "divergence threshold")
    lo, hi = item.figure.layout.yaxis.range
    # The first windows (Muon and AdamW a nat apart early on) set the range to ±2.4, where the
    # band of about ±0.1 was a hairline.
    assert hi < 5 * float(np.nanmax(np.abs(band.y))) and lo == -hi
    assert "the first lie beyond it" in item.caption


def test_on_a_real_pair_the_heldout_delta_chart_draws_the_finding_s_own_numbers(muon):
    # Muon's held-out loss sits a few hundredths of a nat off AdamW's on curves that fall by 19
    # nats: the delta chart shows the difference and the band the finding had to clear.
    finding = next(d for d in muon.detections if d.detector == "heldout_divergence" and d.run == "muon")
    item = figure(muon, "fig-heldout-delta")
    line = next(t for t in item.figure.data if (t.name or "").endswith("(median over sets)"))
    band = next(t for t in item.figure.data if t.name == "held-out divergence threshold")
    at = list(np.asarray(line.x, dtype=float)).index(float(finding.peak_step))
    assert float(line.y[at]) == pytest.approx(finding.evidence["delta"])
    assert -float(band.y[at]) == pytest.approx(finding.evidence["band"])
    assert abs(float(line.y[at])) > finding.evidence["band"]
