"""Block Kit for one notification: who (run, detector, metric), how bad (its size, since when, the
evidence numbers, one line each), where (steps, and a button to the dashboard view of that range)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, ContextBlock, HeaderBlock, SectionBlock
from slack_sdk.models.blocks.basic_components import MarkdownTextObject

from monitor.judging.settings_diff import payload_text

# Block Kit's own limits (api.slack.com/reference/block-kit/blocks): header text 150 characters,
# section text 3,000, at most 10 fields per section.
HEADER_MAX = 150
SECTION_MAX = 3000
# Evidence numbers shown; a detector with more numbers than this is summarised by the first ones.
EVIDENCE_LINES_MAX = 20

_ICON = {"info": ":information_source:", "warning": ":warning:", "critical": ":rotating_light:"}


def render(n: dict[str, Any], follow_up: bool = False) -> tuple[str, list[dict]]:
    """(fallback text, blocks) for a notification built by `ledger.notification`: the incident as
    it stands now. `follow_up`: the message is a new one after the incident's first (a webhook
    cannot edit what it posted), so it names the incident and that first message."""
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
        lead = _esc(n["message"] + (f" ({n['reason']})" if n.get("reason") else ""))
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
        SectionBlock(text=MarkdownTextObject(text=_clip(state_lines(n), SECTION_MAX))),
        SectionBlock(fields=[MarkdownTextObject(text=f"*{k}*\n{_esc(str(v))}") for k, v in fields]),
        ActionsBlock(elements=[
            ButtonElement(text="Open in dashboard", url=n["dashboard_url"], action_id="gapwatch_open_dashboard")
        ]),
    ]
    context = f"gapwatch alert #{n['alert_id']} · {kind} · incident `{_esc(str(n.get('incident_id')))}`"
    first = n.get("first_message")
    if follow_up and first:
        context += (f" · follow-up to its first message `{first['idempotency_key']}` of "
                    f"{_utc(first['queued_at'])}")
    blocks.append(ContextBlock(elements=[
        MarkdownTextObject(text=f"{context} · key `{n['idempotency_key']}`")
    ]))
    # The fallback text is shown in notifications and parsed as mrkdwn like the blocks: a run
    # named `<!channel>` must not ping a channel from it either.
    return _esc(text), [b.to_dict() for b in blocks]


def state_lines(n: dict[str, Any]) -> str:
    """The incident now, one line each: its size, since when, the evidence, and where the run's
    settings differ from the reference's."""
    size = f"{_num(n.get('score'))} times its band" if n.get("score") is not None else "no score"
    settings = payload_text(n["settings"]) if n.get("settings") else None
    return "\n".join([
        f"*Size*: {size}, steps {n['start_step']:,}–{n['end_step']:,}, worst at step {n['peak_step']:,}",
        f"*Since*: step {n.get('since_step', n['start_step']):,}",
        f"*Evidence*: {evidence_line(n.get('evidence') or {})}",
        *([f"*Settings* (run vs reference): {_esc(settings)}"] if settings else []),
    ])


def reply(n: dict[str, Any]) -> str:
    """A short reply in the incident's thread: what changed, once per notification after the first."""
    if n["kind"] == "resolved":
        head = f"Resolved: ended at step {n['end_step']:,}, worst at step {n['peak_step']:,}"
    else:
        head = f"{n['kind'].capitalize()}: {n.get('reason') or n['message']}"
    return _esc(f"{head} · {n.get('name') or n['detector']} since step {n.get('since_step', n['start_step']):,}")


def evidence_line(evidence: dict[str, Any]) -> str:
    """The evidence numbers on one line, and the other explanations that joined the incident."""
    also = evidence.get("also") if isinstance(evidence.get("also"), dict) else {}
    items = [(k, v) for k, v in evidence.items() if k != "also"]
    parts = [f"{_esc(str(k))}: `{_esc(_num(v))}`" for k, v in items[:EVIDENCE_LINES_MAX]]
    if len(items) > EVIDENCE_LINES_MAX:
        parts.append(f"… and {len(items) - EVIDENCE_LINES_MAX} more")
    if also:
        parts.append("also " + "; ".join(_esc(str(k)) for k in also))
    return " · ".join(parts) or "none"


def _utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(float(epoch), dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


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
