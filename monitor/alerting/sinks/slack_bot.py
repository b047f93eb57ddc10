"""Slack through a bot token and the Web API (slack_sdk's WebClient): one message per incident.

The incident's first notification to this sink posts a message (chat.postMessage); Slack answers
with the message's channel ID and ts, returned as `SendResult.message_ref` for the outbox to keep.
Each later notification of the incident (escalated, updated, resolved) comes back with that
reference as `notification["thread"]`: the message is rewritten to the incident as it stands
(chat.update), and a short reply in its thread (thread_ts) tells the person what changed, once
per notification. A message that was deleted in Slack is posted anew, and the new one is kept.

As with the webhook sink, the outbox retries (no retry handlers here), errors come back as
results, and the token, the credential, is masked in every message that leaves this module.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from monitor.alerting.backoff import parse_retry_after
from monitor.alerting.config import SinkConfig
from monitor.alerting.secrets import RedactingFilter, redact
from monitor.alerting.sinks import slack_blocks
from monitor.alerting.sinks.base import SENT, SendResult, header, one_line

# chat.update's answers for a message that is gone or not ours to edit: post a new one instead.
MESSAGE_GONE = ("message_not_found", "cant_update_message", "channel_not_found")


class SlackBotSink:
    def __init__(self, config: SinkConfig, timeout_s: float) -> None:
        assert config.token is not None and config.channel
        self.name = config.name
        self._token = config.token
        self._channel = config.channel
        logger = logging.getLogger(f"gapwatch.alerting.slack_bot.{config.name}")
        logger.addFilter(RedactingFilter(config.token))
        # As for the webhook client: slack_sdk logs requests at DEBUG; we report failures ourselves.
        logger.setLevel(logging.CRITICAL)
        self._client = WebClient(token=config.token.reveal(), base_url=config.api_url, timeout=timeout_s,
                                 retry_handlers=[], logger=logger)

    def send(self, notification: dict[str, Any]) -> SendResult:
        try:
            thread = notification.get("thread")
            if not thread:
                return self._post(notification)
            try:
                text, blocks = slack_blocks.render(notification)
                self._client.chat_update(channel=thread["channel"], ts=thread["ts"], text=text, blocks=blocks)
            except SlackApiError as exc:
                if exc.response.get("error") in MESSAGE_GONE:
                    return self._post(notification)
                raise
            self._client.chat_postMessage(channel=thread["channel"], thread_ts=thread["ts"],
                                          text=slack_blocks.reply(notification))
            return SENT
        except SlackApiError as exc:
            response = exc.response
            status = response.status_code
            retry_after = None
            if status == 429:
                retry_after = parse_retry_after(header(response.headers, "Retry-After"), time.time())
            return SendResult(ok=False, error=self._clean(f"HTTP {status}: {response.get('error') or response.data}"),
                              retry_after_s=retry_after)
        except Exception as exc:  # noqa: BLE001 - urllib raises many types; all mean "not delivered"
            return SendResult(ok=False, error=self._clean(f"{type(exc).__name__}: {exc}"))

    def _post(self, notification: dict[str, Any]) -> SendResult:
        text, blocks = slack_blocks.render(notification)
        response = self._client.chat_postMessage(
            channel=self._channel, text=text, blocks=blocks,
            metadata={"event_type": "gapwatch_alert",
                      "event_payload": {"idempotency_key": notification["idempotency_key"]}},
        )
        # chat.update needs the channel's ID, which the answer gives even when a name was configured.
        return SendResult(ok=True, message_ref=json.dumps({"channel": response["channel"], "ts": response["ts"]}))

    def _clean(self, text: str) -> str:
        return one_line(redact(text, self._token))
