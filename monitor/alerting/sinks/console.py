"""The default sink: one line per notification on the terminal (what `make demo` shows)."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape

from monitor.alerting.sinks.base import SENT, SendResult
from monitor.judging.settings_diff import payload_text

_STYLE = {"info": "cyan", "warning": "yellow", "critical": "bold red", "resolved": "green"}


class ConsoleSink:
    def __init__(self, name: str = "console", stream: TextIO | None = None) -> None:
        self.name = name
        self._console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)

    def send(self, n: dict[str, Any]) -> SendResult:
        label = "resolved" if n["kind"] == "resolved" else n["severity"]
        head = f"[{_STYLE[label]}]{label.upper():8}[/] alert #{n['alert_id']} {escape(n.get('name') or n['detector'])} on " \
               f"{escape(n['run'])} {escape(n['metric'])} steps {n['start_step']}-{n['end_step']}"
        if n["kind"] == "resolved":
            line = f"{head}: ended (worst at step {n['peak_step']})"
        elif n["kind"] in ("escalated", "updated"):
            line = f"{head}: {n['kind']} ({escape(n.get('reason') or '')}): {escape(n['message'])}"
        else:
            line = f"{head}: {escape(n['message'])}"
        settings = payload_text(n["settings"]) if n["kind"] == "opened" and n.get("settings") else None
        if settings and n["settings"]["given_differently_count"]:
            line += f" (settings unlike {escape(str(n['reference']))}'s: {escape(settings)})"
        self._console.print(f"{line}  {escape(n['dashboard_url'])}")
        return SENT
