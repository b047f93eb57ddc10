"""Webhook URLs are secrets: they are the credential. This module keeps them out of sight.

A `Secret` prints as `***` wherever it ends up (reprs of configs, f-strings, logs), and `redact`
scrubs a secret out of any text that came back from a library (exception messages, error bodies)
before that text is logged or stored: in every spelling a server may echo it back (any case,
percent- or form-encoded in part or whole, once or twice, JSON-escaped).
"""

from __future__ import annotations

import functools
import logging
import re
from urllib.parse import urlsplit

MASK = "***"


class Secret:
    """A string that never shows itself; `reveal()` is the one way to read it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self):
        # Pickling would be a way out of the process in plain text.
        raise TypeError("a Secret cannot be pickled")


def secret_fragments(url: str) -> list[str]:
    """The parts of a webhook URL that would give it away on their own: the whole URL, and its path
    and query (a Slack hook's path *is* the token; the host alone is harmless)."""
    parts = urlsplit(url)
    fragments = [url]
    tail = url.split(parts.netloc, 1)[-1] if parts.netloc else ""
    if tail.strip("/"):
        fragments.append(tail)
    if parts.path.strip("/"):
        fragments.append(parts.path)
        # Each path segment long enough to be a token on its own (Slack: T.../B.../the secret).
        fragments.extend(seg for seg in parts.path.split("/") if len(seg) >= 8)
    if parts.query:
        fragments.append(parts.query)
    if parts.password:
        fragments.append(parts.password)
    # Longest first, so the whole URL is masked as one piece rather than piecemeal.
    return sorted(set(fragments), key=len, reverse=True)


def spelled_any_way(fragment: str) -> str:
    """A regular expression for a fragment of a URL as text a server or library wrote may spell
    it: each character as itself or percent-encoded (once or twice, either case of hex digits),
    `+` for a space (form encoding), JSON's `\\/` and `\\u00XX`. Case is left to the match."""
    parts = []
    for char in fragment:
        code = f"{ord(char):02x}" if ord(char) < 256 else None
        forms = [re.escape(char)]
        if code is not None:
            forms += [f"%{code}", f"%25{code}", rf"\\u00{code}"]
        if char == " ":
            forms.append(r"\+")
        if char == "/":
            forms.append(r"\\/")
        parts.append(f"(?:{'|'.join(forms)})")
    return "".join(parts)


@functools.lru_cache(maxsize=64)
def _pattern(url: str) -> re.Pattern:
    # Longest first (secret_fragments' order), so a whole URL is masked as one piece.
    return re.compile("|".join(spelled_any_way(f) for f in secret_fragments(url)), re.IGNORECASE)


def redact(text: str, *secrets: Secret | None) -> str:
    """`text` with every fragment of every secret, in every spelling, replaced by the mask."""
    for secret in secrets:
        if secret is None:
            continue
        text = _pattern(secret.reveal()).sub(MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in every record that passes through a logger."""

    def __init__(self, *secrets: Secret) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message, *self._secrets)
        if clean != message:
            record.msg, record.args = clean, None
        return True
