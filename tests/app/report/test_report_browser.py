"""The HTML report in a real headless Chromium: it draws every chart, logs no error, asks the
network for nothing, and runs no text from a run as code."""

from __future__ import annotations

import pytest

from app.report import alone, build_report, compare, render_html

pytestmark = pytest.mark.browser

HOSTILE_RUN = "run <img src=x onerror=alert(1)>"
HOSTILE_REF = "ref </script><script>alert(2)</script>"


def test_report_opens_offline_and_draws_every_chart(synthetic, tmp_path, open_in_chromium):
    resume = {"step": 1500, "kind": "resume", "attempt": 2,
              "payload": {"restored_step": 1501, "restored_data_position": 1500 * 8, "global_batch_size": 8}}
    run = synthetic(name=HOSTILE_RUN, seed=1, train_shift=-0.15, shift_from=1801, grad_spikes=(700, 2200),
                    stalls=(400, 1200, 2600), events=[resume])
    report = build_report(compare(run, synthetic(name=HOSTILE_REF, seed=2, grad_spikes=(700,))))
    path = tmp_path / "report.html"
    path.write_text(render_html(report), encoding="utf-8")
    visit = open_in_chromium(path, "report-synthetic.png")
    assert visit.console_errors == []
    assert visit.requests == []
    assert visit.dialogs == []
    assert visit.plots == len(report.figures) >= 7
    # The title shows the names as written, not as markup.
    assert visit.title == f"gapwatch report: {HOSTILE_RUN} vs {HOSTILE_REF}"


def test_a_report_of_a_run_alone_opens_and_draws_its_charts(synthetic, tmp_path, open_in_chromium):
    report = build_report(alone(synthetic(name=HOSTILE_RUN, seed=1, grad_spikes=(700, 2200), stalls=(400,))))
    path = tmp_path / "report-alone.html"
    path.write_text(render_html(report), encoding="utf-8")
    visit = open_in_chromium(path, "report-alone.png")
    assert visit.console_errors == [] and visit.requests == [] and visit.dialogs == []
    assert visit.plots == len(report.figures) >= 3  # train loss, grad norm, throughput, findings
    assert visit.title == f"gapwatch report: {HOSTILE_RUN}"
