"""What every sink offers the outbox: `send(notification) -> SendResult`, never raising."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class SendResult:
    ok: bool
    error: str = ""
    """One line saying what went wrong, secrets masked (it is logged and stored)."""
    retry_after_s: float | None = None
    """The receiver asked us to wait this long (HTTP 429 Retry-After)."""
    message_ref: str | None = None
    """Where the receiver keeps the message it just posted (JSON text), for a sink that edits one
    message per incident: the outbox stores it and hands it back with the incident's next
    notification to that sink as `notification["thread"]`."""


SENT = SendResult(ok=True)


class Sink(Protocol):
    name: str

    def send(self, notification: dict[str, Any]) -> SendResult:
        """Deliver one notification; report failure in the result instead of raising. A sink that
        returned a `message_ref` for an earlier notification of the same incident finds it under
        `notification["thread"]`."""
        ...


def header(headers: Any, name: str) -> str | None:
    """A header's value, whatever the case of its name and whether values are lists or strings."""
    if headers is None:
        return None
    for key, value in dict(headers).items():
        if key.lower() == name.lower():
            return value[0] if isinstance(value, list) and value else value
    return None


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"

