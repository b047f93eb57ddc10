"""The offline report: two runs compared in one self-contained file (HTML, Markdown or JSON), or a
run with no reference reported alone (`alone`; each table that compares says why it is empty).

    pair = load_pair(store, "run", "reference")      # load, align, detect (inputs.py)
    report = build_report(pair, ReportConfig())       # tables, verdict, figures (build.py)
    text = render(report, "html")                     # render_html / render_markdown / render_json
"""

from __future__ import annotations

from app.report.build import ReportConfig, build_report
from app.report.inputs import alone, compare, load_pair
from app.report.model import Report
from app.report.render_html import render_html
from app.report.render_json import render_json
from app.report.render_markdown import render_markdown

FORMATS = {"html": render_html, "md": render_markdown, "json": render_json}


def render(report: Report, fmt: str) -> str:
    try:
        return FORMATS[fmt](report)
    except KeyError:
        raise ValueError(f"report format must be one of {', '.join(FORMATS)}, not {fmt!r}") from None


__all__ = ["FORMATS", "Report", "ReportConfig", "alone", "build_report", "compare", "load_pair", "render",
           "render_html", "render_json", "render_markdown"]
