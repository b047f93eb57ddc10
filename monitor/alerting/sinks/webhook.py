"""A generic JSON webhook: the notification dict itself, POSTed with an Idempotency-Key header so a
receiver can drop a repeat (the outbox may resend a notification whose success it never heard of)."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from typing import Any

from monitor.alerting.backoff import parse_retry_after
from monitor.alerting.config import SinkConfig
from monitor.alerting.secrets import redact
from monitor.alerting.sinks.base import SENT, SendResult, header, one_line

IDEMPOTENCY_HEADER = "Idempotency-Key"
# Bytes of an error response read. The secret is masked in them before `one_line` cuts them to a
# log line's length, so no cut can leave part of it behind.
ERROR_BODY_BYTES = 64 * 1024


class WebhookSink:
    def __init__(self, config: SinkConfig, timeout_s: float) -> None:
        assert config.url is not None
        self.name = config.name
        self._url = config.url
        self._timeout_s = timeout_s
        # No proxy handler: an alert must go where it is configured to go, not via $HTTP_PROXY.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def send(self, notification: dict[str, Any]) -> SendResult:
        body = json.dumps(notification, allow_nan=False).encode()  # `ledger.notification` made it strict
        request = urllib.request.Request(
            self._url.reveal(), data=body, method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "gapwatch",
                     IDEMPOTENCY_HEADER: notification["idempotency_key"]},
        )
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                response.read()
                return SENT
        except urllib.error.HTTPError as exc:
            text = exc.read(ERROR_BODY_BYTES).decode("utf-8", "replace")
            retry_after = None
            if exc.code == 429:
                retry_after = parse_retry_after(header(exc.headers, "Retry-After"), time.time())
            return SendResult(ok=False, error=self._clean(f"HTTP {exc.code}: {text}"), retry_after_s=retry_after)
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            return SendResult(ok=False, error=self._clean(f"{type(exc).__name__}: {exc}"))

    def _clean(self, text: str) -> str:
        return one_line(redact(text, self._url))
