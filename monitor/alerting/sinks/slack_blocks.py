"""Block Kit for one notification: who (run, detector, metric), how bad (severity, score, the
evidence numbers), where (steps, and a button to the dashboard view of that range)."""

from __future__ import annotations

import math
from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, ContextBlock, HeaderBlock, SectionBlock
from slack_sdk.models.blocks.basic_components import MarkdownTextObject

# Block Kit's own limits (api.slack.com/reference/block-kit/blocks): header text 150 characters,
# section text 3,000, at most 10 fields per section.
HEADER_MAX = 150
SECTION_MAX = 3000
# Evidence lines shown; a detector with more numbers than this is summarised by the first ones.
EVIDENCE_LINES_MAX = 20

_ICON = {"info": ":information_source:", "warning": ":warning:", "critical": ":rotating_light:"}


def render(n: dict[str, Any]) -> tuple[str, list[dict]]:
    """(fallback text, blocks) for a notification built by `notifications.build`."""
    kind = n["kind"]
    what = f"{n.get('name') or n['detector']} on {n['run']}"
    if kind == "resolved":
        title = f":white_check_mark: Resolved · {what}"
        lead = (f"The incident on `{_esc(n['metric'])}` ended: flagged from step {n['start_step']} "
                f"to {n['end_step']}, worst at step {n['peak_step']}.")
        text = f"[resolved] {what} ({n['metric']}), steps {n['start_step']}-{n['end_step']}"
    else:
        sev = n["severity"].upper()
        verb = {"escalated": f"Escalated ({n.get('reason') or sev})", "updated": "Updated"}.get(kind, sev)
        title = f"{_ICON.get(n['severity'], '')} {verb} · {what}".strip()
        since = n.get("since_step", n["start_step"])
        lead = _esc(f"Since step {since} · {n['message']}" + (f" ({n['reason']})" if n.get("reason") else ""))
        text = f"[{n['severity']}] {what} ({n['metric']}), steps {n['start_step']}-{n['end_step']}: {n['message']}"
    fields = [
        ("Run", n["run"]), ("Reference", n.get("reference") or "none"), ("Detector", n["detector"]),
        ("Metric", n["metric"]), ("Steps", f"{n['start_step']}–{n['end_step']}"),
        ("Peak step", str(n["peak_step"])), ("Score", _num(n.get("score"))),
        ("Severity", n["severity"]), ("Attempt", str(n.get("attempt", 0))),
    ]
    blocks = [
        HeaderBlock(text=_clip(title, HEADER_MAX)),
        SectionBlock(text=MarkdownTextObject(text=_clip(lead, SECTION_MAX))),
        SectionBlock(fields=[MarkdownTextObject(text=f"*{k}*\n{_esc(str(v))}") for k, v in fields]),
    ]
    evidence = _evidence_lines(n.get("evidence") or {})
    if evidence:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=_clip("*Evidence*\n" + evidence, SECTION_MAX))))
    blocks.append(ActionsBlock(elements=[
        ButtonElement(text="Open in dashboard", url=n["dashboard_url"], action_id="gapwatch_open_dashboard")
    ]))
    blocks.append(ContextBlock(elements=[
        MarkdownTextObject(text=f"gapwatch alert #{n['alert_id']} · {n['kind']} · key `{n['idempotency_key']}`")
    ]))
    # The fallback text is shown in notifications and parsed as mrkdwn like the blocks: a run
    # named `<!channel>` must not ping a channel from it either.
    return _esc(text), [b.to_dict() for b in blocks]


def _evidence_lines(evidence: dict[str, Any]) -> str:
    lines = [f"• {_esc(str(k))}: `{_esc(_num(v))}`" for k, v in list(evidence.items())[:EVIDENCE_LINES_MAX]]
    if len(evidence) > EVIDENCE_LINES_MAX:
        lines.append(f"• … and {len(evidence) - EVIDENCE_LINES_MAX} more")
    return "\n".join(lines)


def _num(v: Any) -> str:
    """Numbers to four significant digits (enough to judge a delta against a band)."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return str(v)


def _esc(text: str) -> str:
    """Slack mrkdwn treats &, < and > as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
