"""A receiver that fails and echoes the webhook URL in its own spelling: the secret reaches neither
the log, nor the store, in any spelling; the error body is stored cut short."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from urllib.parse import quote, unquote, urlencode

import pytest

from monitor.alerting.config import AlertingConfig, SinkConfig
from monitor.alerting.outbox import Outbox
from monitor.alerting.secrets import MASK, Secret, redact
from monitor.alerting.sinks import build_sinks
from monitor.schema import Severity
from monitor.store import open_store

from .helpers import FAST_DELIVERY, detection, queue_incidents
from .test_delivery import outbox_rows

SECRET_PART = "s3cr3tT0kenValue"
SPELLINGS = {
    "as sent": lambda url: url,
    "lowercased": str.lower,
    "uppercased": str.upper,
    "percent-encoded": lambda url: quote(url, safe=""),
    "percent-encoded, lowercase hex": lambda url: quote(url, safe="").lower(),
    "every character percent-encoded": lambda url: "".join(f"%{ord(c):02X}" for c in url),
    "percent-encoded twice": lambda url: quote(quote(url, safe=""), safe=""),
    "form-encoded": lambda url: urlencode({"callback": url}),
    "JSON-escaped": lambda url: json.dumps({"url": url}).replace("/", "\\/"),
    "path only, uppercased": lambda url: url[url.index("/hook"):].upper(),
}


def unspelled(text: str) -> str:
    """Text with every encoding the spellings use undone, lowercased: what a reader could decode."""
    for _ in range(3):
        text = unquote(text.replace("+", " "))
    return text.replace("\\/", "/").lower()


def config_for(kind: str, url: str) -> AlertingConfig:
    sink = SinkConfig(kind, kind, Severity.INFO, url=Secret(url), url_env="HOOK_URL")
    return AlertingConfig(dashboard_url="http://dash.test:8050", delivery=FAST_DELIVERY, sinks=[sink])


@pytest.mark.parametrize("kind", ["slack", "webhook"])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_an_echoed_url_is_masked_in_every_spelling(sqlite_url, receiver, caplog, kind, spelling):
    caplog.set_level(logging.DEBUG)
    url = receiver.url()
    spell = SPELLINGS[spelling]
    receiver.echo(500, lambda path: f"upstream said {spell(f'http://127.0.0.1:{receiver.port}{path}')} " + "x" * 5000)
    store = open_store(sqlite_url)
    store.ensure_run("r")
    config = config_for(kind, url)
    queue_incidents(store, config, [detection()])
    outbox = Outbox(store, build_sinks(config), config)
    assert outbox.deliver_due().failed == 1
    assert len(receiver.all()) == 1
    error = outbox_rows(store)[0]["last_error"]
    store.close()
    assert error.startswith("HTTP 500: upstream said ") and MASK in error and len(error) <= 300  # cut short
    assert SECRET_PART.lower() not in unspelled(error)
    assert SECRET_PART.lower() not in unspelled(caplog.text) and "HTTP 500" in caplog.text
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    for path in db.parent.glob(db.name + "*"):
        assert SECRET_PART.lower() not in unspelled(path.read_bytes().decode("latin-1")), path


def test_a_cut_never_leaves_part_of_the_secret():
    url = "https://hooks.example.test/services/T0000/B0000/" + SECRET_PART
    secret = Secret(url)
    assert redact("x" * 290 + url, secret) == "x" * 290 + MASK
    assert redact(f"{url.upper()} and {quote(url, safe='')}", secret) == f"{MASK} and {MASK}"
    assert redact("https://hooks.example.test/ is only the host", secret) == "https://hooks.example.test/ is only the host"
