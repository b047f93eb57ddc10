"""The report's table of the settings in which the run and its reference differ
(monitor/judging/settings_diff.py compares them)."""

from __future__ import annotations

from app.report.model import Column, Table
from app.report.pair import NO_REFERENCE, ComparedPair
from monitor.judging.settings_diff import compare_settings

# Past this many differing settings (two Hugging Face configs of different models differ in dozens
# of architecture fields) the rest are counted, not listed.
MAX_ROWS = 60


def settings_table(pair: ComparedPair) -> Table:
    run = pair.run.name
    reference = pair.reference.name if pair.reference is not None else "reference"
    table = Table(
        id="settings",
        title="Settings that differ",
        columns=[Column("setting", "setting", fmt=""), Column("run", run, fmt=""),
                 Column("reference", reference, fmt="")],
        flag_key="differs",
    )
    if pair.reference is None:
        table.empty_reason = NO_REFERENCE
        return table
    diff = compare_settings(pair.run.info.config, pair.reference.info.config)
    if not diff.comparable:
        table.empty_reason = diff.why_not(run, reference)
        return table
    table.rows = [{"setting": d.setting, "run": d.run, "reference": d.reference, "differs": d.both}
                  for d in diff.differences[:MAX_ROWS]]
    left = len(diff.differences) - len(table.rows)
    table.note = (f"{diff.same:,} of {diff.total:,} settings are the same in both runs"
                  + (f"; {left:,} more that differ are not listed" if left else "")
                  + ". Settings both runs give, differently, come first; \"-\" is a setting the run does not record.")
    if not diff.differences:
        table.empty_reason = f"the two runs record the same {diff.total:,} settings"
    return table
