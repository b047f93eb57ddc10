"""Sinks: where notifications go. `build_sinks` makes one object per configured sink."""

from __future__ import annotations

from typing import TextIO

from monitor.alerting.config import AlertingConfig
from monitor.alerting.sinks.base import SendResult, Sink
from monitor.alerting.sinks.console import ConsoleSink
from monitor.alerting.sinks.slack import SlackSink
from monitor.alerting.sinks.slack_bot import SlackBotSink
from monitor.alerting.sinks.webhook import WebhookSink

__all__ = ["SendResult", "Sink", "build_sinks"]


def build_sinks(config: AlertingConfig, stream: TextIO | None = None) -> dict[str, Sink]:
    """One sink object per configured sink, by name; `stream` is where console sinks print."""
    sinks: dict[str, Sink] = {}
    for sink in config.sinks:
        if sink.kind == "console":
            sinks[sink.name] = ConsoleSink(sink.name, stream)
        elif sink.kind == "slack":
            sinks[sink.name] = SlackSink(sink, config.delivery.timeout_s)
        elif sink.kind == "slack_bot":
            sinks[sink.name] = SlackBotSink(sink, config.delivery.timeout_s)
        else:
            sinks[sink.name] = WebhookSink(sink, config.delivery.timeout_s)
    return sinks
