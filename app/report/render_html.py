"""The report as one self-contained HTML file that opens offline.

plotly.js is inlined once (about 4.6 MB) and every chart is a div plus a script with its data, so
the file needs no network at all; a Content-Security-Policy forbids every fetch, so nothing added
later can make one silently either. Text is escaped by Jinja2's autoescaping; chart text is
escaped inside the figure functions (app/figures/style.py), and plotly writes the chart data as
script-safe JSON (`<`, `>` and `/` as \\u escapes).
"""

from __future__ import annotations

import json
from importlib import resources

import jinja2
import plotly.io as pio
from markupsafe import Markup
from plotly.offline import get_plotlyjs

from app.report.cells import cell
from app.report.model import Column, Report
from app.report.render_json import plain

# Nothing may be fetched: no connect, no images or fonts from anywhere but data: URLs. Inline
# scripts and styles are the report's own.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; "
                           "style-src 'unsafe-inline'; img-src data: blob:; font-src data:")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
# Rows shown before a table folds the rest into a <details>: the downstream table of an OLMo run has ~80.
DEFAULT_MAX_ROWS = 25

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gapwatch report: {{ r.run }}{% if r.reference %} vs {{ r.reference }}{% endif %}</title>
<style>{{ css }}</style>
{% if has_figures %}<script>{{ plotlyjs }}</script>{% endif %}
</head>
<body>
<main>
{% if r.reference %}<h1>{{ r.run }} <span class="vs">vs reference</span> {{ r.reference }}</h1>
<div class="meta">Compared on the {{ r.axis }} axis ({{ r.axis_reason }}) · generated {{ r.generated_at }} by gapwatch</div>
{% else %}<h1>{{ r.run }} <span class="vs">alone: no reference</span></h1>
<div class="meta">Judged on its own steps · generated {{ r.generated_at }} by gapwatch</div>{% endif %}
<section class="verdict {{ r.verdict.severity }}" id="verdict">
  <div class="headline">{{ r.verdict.headline }}</div>
  <p>{{ verdict_rest }}</p>
  {% if r.verdict.evidence %}<details><summary>Evidence ({{ r.verdict.evidence|length }})</summary>
  <ul>{% for line in r.verdict.evidence %}<li>{{ line }}</li>{% endfor %}</ul></details>{% endif %}
</section>
<nav><ul>
{% for t in sections %}<li><a href="#{{ t.id }}">{{ t.title }}</a></li>{% endfor %}
</ul></nav>
{% macro rows_html(t, rows) %}{% for row in rows %}<tr{% if row.flagged %} class="flagged"{% endif %}>{% for c in row.cells %}<td{% if c.numeric %} class="num"{% endif %}>{{ c.text }}</td>{% endfor %}</tr>
{% endfor %}{% endmacro %}
{% macro figure_html(f) %}<figure id="{{ f.id }}"><figcaption>{{ f.title }}{% if f.caption %} — {{ f.caption }}{% endif %}</figcaption>
{{ f.html|safe }}
</figure>{% endmacro %}
{% for t in sections %}
<section id="{{ t.id }}">
<h2>{{ t.title }}</h2>
<div class="table-wrap"><table>
<thead><tr>{% for c in t.columns %}<th>{{ c.label }}</th>{% endfor %}</tr></thead>
<tbody>
{{ rows_html(t, t.rows[:max_rows]) }}</tbody></table></div>
{% if t.rows|length > max_rows %}<details><summary>{{ t.rows|length - max_rows }} more rows</summary>
<div class="table-wrap"><table><thead><tr>{% for c in t.columns %}<th>{{ c.label }}</th>{% endfor %}</tr></thead>
<tbody>{{ rows_html(t, t.rows[max_rows:]) }}</tbody></table></div></details>{% endif %}
{% if t.note %}<p class="note">{{ t.note }}</p>{% endif %}
{% for f in t.figures %}{{ figure_html(f) }}{% endfor %}
</section>
{% endfor %}
{% if loose_figures %}<section id="charts"><h2>Charts</h2>
{% for f in loose_figures %}{{ figure_html(f) }}{% endfor %}</section>{% endif %}
{% if r.notes %}<section id="not-compared"><h2>Not compared</h2><ul>{% for n in r.notes %}<li>{{ n }}</li>{% endfor %}</ul></section>{% endif %}
<details><summary>Settings of this report</summary><pre>{{ parameters }}</pre></details>
<footer>gapwatch offline report · self-contained: opens offline and makes no network request</footer>
</main>
</body>
</html>
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True)


def _rows(table) -> list[dict]:
    out = []
    for row in table.rows:
        out.append({
            "flagged": bool(table.flag_key and row.get(table.flag_key)),
            "cells": [{"text": cell(row.get(c.key), c), "numeric": _numeric(c)} for c in table.columns],
        })
    return out


def _numeric(column: Column) -> bool:
    """Columns with a number format are right-aligned; text columns have none."""
    return bool(column.fmt)


def figure_html(item) -> str:
    return pio.to_html(item.figure, full_html=False, include_plotlyjs=False, include_mathjax=False,
                       config=PLOTLY_CONFIG, div_id=item.id + "-plot")


def render_html(report: Report, max_rows: int = DEFAULT_MAX_ROWS) -> str:
    figures = [{"id": f.id, "title": f.title, "caption": f.caption, "html": figure_html(f), "section": f.section}
               for f in report.figures]
    sections = [{"id": t.id, "title": t.title, "columns": t.columns, "rows": _rows(t), "note": t.note,
                 "figures": [f for f in figures if f["section"] == t.id]}
                for t in report.tables if t.rows]
    placed = {f["id"] for s in sections for f in s["figures"]}
    css = resources.files("app.report").joinpath("report.css").read_text(encoding="utf-8")
    # Our own CSS and the bundled plotly.js go in unescaped: they are not user text.
    return _ENV.from_string(TEMPLATE).render(
        r=report, sections=sections, loose_figures=[f for f in figures if f["id"] not in placed],
        has_figures=bool(figures), max_rows=max_rows, verdict_rest=verdict_rest(report.verdict),
        csp=CONTENT_SECURITY_POLICY, css=Markup(css), plotlyjs=Markup(get_plotlyjs()) if figures else "",
        parameters=json.dumps(plain(report.parameters), indent=2),
    )


def verdict_rest(verdict) -> str:
    """The sentence without its leading headline, which the banner already shows in bold."""
    prefix = verdict.headline + ": "
    if verdict.sentence.startswith(prefix):
        rest = verdict.sentence[len(prefix):]
        return rest[:1].upper() + rest[1:]
    return verdict.sentence
