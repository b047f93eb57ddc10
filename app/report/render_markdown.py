"""The report as Markdown, for pasting into a pull request.

Every text that comes from a run (names, metric keys, detector messages) is escaped so that it
shows as written: GitHub renders inline HTML, links, emphasis and table pipes in Markdown, and a
run named `a|b` or `<img ...>` must neither break a table nor become markup. Long tables are cut
to `max_rows` (the HTML and JSON have them whole).
"""

from __future__ import annotations

import re

from app.report.cells import cell
from app.report.model import Report, Table
from app.report.render_html import verdict_rest

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the characters that start
# markup in GitHub's dialect (code, emphasis, links, HTML, entities, tables, strikethrough).
_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~#])")
DEFAULT_MAX_ROWS = 25


def md(text: object) -> str:
    """Plain text made inert in Markdown, on one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def render_markdown(report: Report, max_rows: int = DEFAULT_MAX_ROWS) -> str:
    v = report.verdict
    out = [
        f"## gapwatch report: {md(report.run)} vs {md(report.reference)}" if report.reference
        else f"## gapwatch report: {md(report.run)}, alone (no reference)",
        "",
        f"> **{md(v.headline)}.** {md(verdict_rest(v))}",
        "",
    ]
    if v.evidence:
        out += ["<details><summary>Evidence</summary>", ""]
        out += [f"- {md(line)}" for line in v.evidence]
        out += ["", "</details>", ""]
    judged = (f"Compared on the {md(report.axis)} axis ({md(report.axis_reason)})" if report.reference
              else "Judged on its own steps")
    out += [f"{judged}. Generated {md(report.generated_at)}.", ""]
    for table in report.tables:
        if table.rows:
            out += _table(table, max_rows)
    if report.notes:
        out += ["### Not compared", ""] + [f"- {md(n)}" for n in report.notes] + [""]
    return "\n".join(out).rstrip() + "\n"


def _table(table: Table, max_rows: int) -> list[str]:
    out = [f"### {md(table.title)}", ""]
    cols = table.columns
    out.append("| " + " | ".join(md(c.label) for c in cols) + " |")
    out.append("|" + "|".join("---" for _ in cols) + "|")
    for row in table.rows[:max_rows]:
        cells = [md(cell(row.get(c.key), c)) for c in cols]
        if table.flag_key and row.get(table.flag_key):
            cells[0] = f"**{cells[0]}**"
        out.append("| " + " | ".join(cells) + " |")
    if len(table.rows) > max_rows:
        out.append(f"\n_{len(table.rows) - max_rows} more rows in the HTML and JSON reports._")
    if table.note:
        out += ["", f"_{md(table.note)}_"]
    return out + [""]
