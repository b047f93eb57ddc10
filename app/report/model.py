"""The report as data: what the renderers (HTML, Markdown, JSON) turn into text.

Building a report (numbers, verdict, figures) and writing it out are kept apart, so that the three
formats always say the same thing and each renderer only decides how it looks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitor.schema import Detection


@dataclass(frozen=True)
class Estimate:
    """A number with its standard error, shown as `value ± stderr`.

    `estimated` marks a standard error that no run logged: it was inferred from the scatter of the
    curve between checkpoints (see app/report/uncertainty.py), and renderers flag it with `≈`.
    """

    value: float
    stderr: float | None = None
    estimated: bool = False


@dataclass(frozen=True)
class Column:
    """One column of a table: the row key it reads, its header and how numbers are written."""

    key: str
    label: str
    # Python format spec for floats (ints are always written whole); "" writes str(value).
    fmt: str = ".4g"
    # Numbers in this column are signed differences: written with an explicit + sign.
    signed: bool = False


@dataclass
class Table:
    """A titled table of rows (dicts keyed by column key) with a note on how to read it."""

    id: str  # stable identifier: the HTML anchor and the JSON key
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    # Why there are no rows (e.g. neither run logged the metric); shown instead of an empty table.
    empty_reason: str = ""
    # Row keys whose truthy value marks the row as a finding (renderers highlight it).
    flag_key: str | None = None
    # Which of the run's steps the rows compare, where the reference does not reach them all
    # ("compared on steps 1–900 of the run's 3,000: the reference stops at step 900"): the note
    # begins with it, and the verdict repeats it and claims nothing of the steps left out.
    scope: str = ""


@dataclass
class Verdict:
    """The sentence at the top of the report and the evidence it rests on."""

    kind: str  # machine label, e.g. "tied", "diverged_below", "memorization_suspected"
    headline: str  # a few words: "Memorization suspected"
    sentence: str  # one sentence a person can paste into a PR
    evidence: list[str] = field(default_factory=list)  # short lines of numbers
    detections: list[Detection] = field(default_factory=list)  # the findings behind it
    severity: str = "info"  # info, warning or critical: the colour of the banner


@dataclass
class FigureItem:
    """One embedded chart: an id for anchors, a caption, and the plotly figure itself."""

    id: str
    title: str
    figure: Any  # plotly.graph_objects.Figure
    caption: str = ""
    section: str = ""  # id of the table it illustrates: drawn right after that table


@dataclass
class Report:
    """Everything the report says about a run compared with its reference (or about a run alone)."""

    run: str
    reference: str | None  # None: a report of the run alone
    generated_at: str  # ISO 8601, UTC
    axis: str  # "step" or "tokens": how the two runs were put side by side
    axis_reason: str
    verdict: Verdict
    tables: list[Table] = field(default_factory=list)
    figures: list[FigureItem] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)  # every finding, both runs
    notes: list[str] = field(default_factory=list)  # what could not be compared, and why
    parameters: dict[str, Any] = field(default_factory=dict)  # the settings that made it

    def table(self, table_id: str) -> Table:
        for t in self.tables:
            if t.id == table_id:
                return t
        raise KeyError(table_id)
