"""The two runs a report compares, as stored and as aligned, with what the detectors found; or a
run alone, when it has no reference (`reference` None: the tables that compare say so)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from monitor.alerting.config import IncidentConfig
from monitor.judging.judge import DetectConfig
from monitor.detectors import in_section, role_of
from monitor.schema import Clean, Detection, NotJudged, RunData, Section


@dataclass
class ComparedPair:
    """Input of every table: built once per report (app/report/inputs.py)."""

    run: RunData  # as stored, full resolution
    reference: RunData | None  # None: the run alone
    aligned_run: RunData  # both on the run's steps, only fairly comparable values (monitor.judging.align)
    aligned_reference: RunData | None
    axis: str  # "step" or "tokens"
    axis_reason: str
    detections: list[Detection] = field(default_factory=list)  # the run, judged against the reference
    reference_detections: list[Detection] = field(default_factory=list)  # the reference on its own
    cleans: list[Clean] = field(default_factory=list)  # clean verdicts of both judgements (end incidents)
    # What the detectors could not judge, by run name (the reference's without the detectors that
    # need a reference, which judged it as the run's reference).
    not_judged: dict[str, list[NotJudged]] = field(default_factory=dict)
    # Series the detectors produced (spike scores), by run name: long frames (step, key, value).
    detector_series: dict[str, pd.DataFrame] = field(default_factory=dict)
    detect: DetectConfig = field(default_factory=DetectConfig)  # how the detectors were set up
    incidents: IncidentConfig = field(default_factory=IncidentConfig)  # how findings group into incidents

    def findings(self, section: Section, metric: str | None = None) -> list[Detection]:
        """The run's detections that `section` shows, as their detectors declare (on this metric,
        when given)."""
        return in_section(self.detections, section, metric)

    def not_logged_by(self, key: str) -> list[str]:
        """Names of the runs (as stored) that never logged a value of `key`."""
        return [d.name for d, _ in self.each_run() if d.series(key).empty]

    def each_run(self) -> list[tuple[RunData, list[Detection]]]:
        """The run and the reference (where there is one), each with its own detections: what the
        tables that set the two side by side show."""
        runs = [(self.run, self.detections)]
        if self.reference is not None:
            runs.append((self.reference, self.reference_detections))
        return runs


    def none_logged(self, what: str) -> str:
        """Why a table of both runs is empty: "neither run logged <what>" (the run alone: "the run
        logged no <what>")."""
        return f"neither run logged {what}" if self.reference is not None else f"the run logged no {what}"


# Why a table that compares the run with its reference has no rows in a report of the run alone.
NO_REFERENCE = "the run has no reference, so nothing is compared (pass --reference NAME to compare it with one)"


def finding_names(found: list[Detection]) -> str:
    """What the findings are, as their incidents are named (the detectors' explanations), for a
    table's "finding" cell: never a detector's name."""
    return "; ".join(sorted({role_of(d).explanation for d in found}))
