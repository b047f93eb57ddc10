"""The report as JSON, for machines: numbers stay numbers, error bars stay separate.

NaN and infinities become null (strict JSON has no spelling for them); an Estimate becomes
{"value", "stderr", "estimated"}. Charts are left out: they are drawings of the numbers here.
"""

from __future__ import annotations

import json
from typing import Any

from monitor import jsonutil
from monitor.schema import Detection

from app.report.model import Estimate, Report

FORMAT_VERSION = 1


def plain(value: Any) -> Any:
    if isinstance(value, Estimate):
        return {"value": plain(value.value), "stderr": plain(value.stderr), "estimated": value.estimated}
    if isinstance(value, Detection):
        return plain(value.to_dict())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return jsonutil.plain(value)


def report_dict(report: Report) -> dict[str, Any]:
    v = report.verdict
    return {
        "format_version": FORMAT_VERSION,
        "run": report.run,
        "reference": report.reference,
        "generated_at": report.generated_at,
        "axis": report.axis,
        "axis_reason": report.axis_reason,
        "verdict": {
            "kind": v.kind, "headline": v.headline, "sentence": v.sentence, "severity": v.severity,
            "evidence": v.evidence, "detections": [plain(d) for d in v.detections],
        },
        "tables": {
            t.id: {
                "title": t.title,
                "note": t.note,
                "empty_reason": t.empty_reason,
                "columns": [{"key": c.key, "label": c.label} for c in t.columns],
                "rows": [plain(r) for r in t.rows],
            }
            for t in report.tables
        },
        "detections": [plain(d) for d in report.detections],
        "notes": report.notes,
        "parameters": plain(report.parameters),
    }


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
