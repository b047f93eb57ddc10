"""Slack through slack_sdk's incoming-webhook client, one HTTP request per `send`.

An incoming webhook answers `ok` and nothing else: no channel, no ts, so a message it posted can
be neither edited (chat.update needs its ts) nor replied to in a thread (thread_ts is that ts).
Each later notification of an incident is therefore a new message that names the incident id and
its first message; a bot token (sinks/slack_bot.py) edits one message per incident instead.

The client gets no retry handlers: the outbox retries, so a wait survives a restart and never
blocks the service inside `send()`. `send()` returns error statuses rather than raising, so the
status is checked here. The URL is the credential: every message that leaves this module is
scrubbed of it, and the client's logger masks it too.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from slack_sdk.webhook import WebhookClient

from monitor.alerting.backoff import parse_retry_after
from monitor.alerting.config import SinkConfig
from monitor.alerting.secrets import RedactingFilter, redact
from monitor.alerting.sinks import slack_blocks
from monitor.alerting.sinks.base import SENT, SendResult, header, one_line

IDEMPOTENCY_HEADER = "Idempotency-Key"


class SlackSink:
    def __init__(self, config: SinkConfig, timeout_s: float) -> None:
        assert config.url is not None
        self.name = config.name
        self._url = config.url
        logger = logging.getLogger(f"gapwatch.alerting.slack.{config.name}")
        logger.addFilter(RedactingFilter(config.url))
        # slack_sdk logs request URLs at DEBUG whenever its logger's own level is DEBUG or unset;
        # we report failures ourselves, so its logger only speaks for the gravest problems.
        logger.setLevel(logging.CRITICAL)
        self._client = WebhookClient(config.url.reveal(), timeout=timeout_s, retry_handlers=[], logger=logger)

    def send(self, notification: dict[str, Any]) -> SendResult:
        text, blocks = slack_blocks.render(notification, follow_up=notification["kind"] != "opened")
        key = notification["idempotency_key"]
        try:
            response = self._client.send(
                text=text,
                blocks=blocks,
                # Slack keeps no idempotency of its own; the key rides along for anyone who reads it.
                metadata={"event_type": "gapwatch_alert", "event_payload": {"idempotency_key": key}},
                headers={IDEMPOTENCY_HEADER: key},
            )
        except Exception as exc:  # noqa: BLE001 - urllib raises many types; all mean "not delivered"
            return SendResult(ok=False, error=self._clean(f"{type(exc).__name__}: {exc}"))
        status = response.status_code
        if 200 <= status < 300:
            return SENT
        retry_after = None
        if status == 429:
            retry_after = parse_retry_after(header(response.headers, "Retry-After"), time.time())
        return SendResult(ok=False, error=self._clean(f"HTTP {status}: {response.body}"), retry_after_s=retry_after)

    def _clean(self, text: str) -> str:
        return one_line(redact(text, self._url))
