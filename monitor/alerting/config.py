"""Typed configuration of incidents, delivery, sinks and silences (filled from a file and env vars).

Every default names where it comes from. The loader (`config_file.py`) turns YAML/TOML into these.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass, field, fields
from typing import Any

from monitor.alerting.secrets import Secret
from monitor.schema import Detection, Severity

SINK_KINDS = ("console", "slack", "slack_bot", "webhook")
SLACK_API_URL = "https://slack.com/api/"
"""Slack's Web API, where a bot token posts and edits messages (slack_sdk's default base URL)."""


@dataclass
class IncidentConfig:
    resolve_after_steps: int = 128
    """Steps a metric must run clean past an incident's last flagged step before it is resolved.
    128 is the window OLMo-core's stability monitor builds its spike baseline from: a metric clean
    for one such window has a fresh baseline."""
    resolve_after_points: int = 2
    """...and at least this many clean observations of the metric: a metric logged every 1,000
    steps (an eval) is resolved by two clean evals, not by 128 steps without one."""
    cooldown_steps: int = 1000
    """After a resolution, a recurrence that ends within this many steps opens no new alert. 1,000 is
    the window of the OLMo 2 paper's spike score: at most one new alert per window and incident key."""
    escalate_after_steps: int = 10_000
    """An incident still growing this many steps after its first flagged step escalates once: ten
    evaluations at the every-1,000-steps cadence of OLMo's in-loop evals. A policy, not a threshold:
    it says when a persistent fault is worth telling again, within max_growth_escalations."""
    max_growth_escalations: int = 2
    """Times one incident may escalate because it grew (its size doubled, or it reached downstream
    evals); a severity that rises always escalates. The person is told when it opens and at most
    twice more as it grows."""
    resolve_after_steps_by_detector: dict[str, int] = field(default_factory=dict)
    """Per-detector overrides of `resolve_after_steps`, for metrics logged sparsely (evals)."""

    def __post_init__(self) -> None:
        # Every setting counts steps, points or escalations: a negative count means nothing.
        counts = [(name, getattr(self, name)) for name in ("resolve_after_steps", "resolve_after_points",
                                                           "cooldown_steps", "escalate_after_steps",
                                                           "max_growth_escalations")]
        counts += [(f"resolve_after_steps_by_detector: {name}", steps)
                   for name, steps in self.resolve_after_steps_by_detector.items()]
        for name, value in counts:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"incidents: {name} must be a whole number, 0 or more, not {value!r}")

    def resolve_after(self, detector: str) -> int:
        return int(self.resolve_after_steps_by_detector.get(detector, self.resolve_after_steps))


@dataclass
class DeliveryConfig:
    timeout_s: float = 5.0
    """Seconds one HTTP request may take. Slack answers a webhook in well under a second."""
    backoff_base_s: float = 1.0
    """First retry delay after a failure; it doubles with each further failure."""
    backoff_max_s: float = 300.0
    """Cap on the retry delay: a sink that comes back is tried again within five minutes."""
    max_retry_after_s: float = 3600.0
    """Longest Retry-After obeyed: a receiver asking for more is tried again after an hour."""
    claim_lease_s: float = 30.0
    """A notification claimed by a delivery loop that died is free for another after this long.
    Must exceed `timeout_s`, or a slow request could be sent twice by two loops."""
    batch_size: int = 50
    """Notifications read from the outbox per delivery pass."""

    def __post_init__(self) -> None:
        for f in fields(self):  # seconds and a count: none can be negative
            if getattr(self, f.name) < 0:
                raise ValueError(f"delivery: {f.name} must be 0 or more, not {getattr(self, f.name)!r}")
        if self.claim_lease_s <= self.timeout_s:
            raise ValueError("claim_lease_s must exceed timeout_s")


@dataclass
class SinkConfig:
    name: str
    """Unique name; the outbox stores this name, never the URL it resolves to."""
    kind: str = "console"
    """console, slack (an incoming webhook through slack_sdk), slack_bot (a bot token through
    Slack's Web API: one message per incident, edited in place) or webhook (generic JSON POST)."""
    min_severity: Severity = Severity.WARNING
    """Alerts below this severity are not sent here."""
    url: Secret | None = None
    """The webhook URL (slack, webhook); a secret, resolved from `url_env` or the file."""
    url_env: str | None = None
    """Name of the environment variable the URL came from, for messages (the value is never shown)."""
    token: Secret | None = None
    """slack_bot: the bot token (xoxb-...), a secret resolved from `token_env` or the file."""
    token_env: str | None = None
    """Name of the environment variable the bot token came from (the value is never shown)."""
    channel: str | None = None
    """slack_bot: the channel to post in (an ID such as C0123456789, or a name)."""
    api_url: str = SLACK_API_URL
    """slack_bot: the Web API's base URL (another one only for a proxy or a test server)."""
    rate_per_minute: float = 60.0
    """Sustained messages a minute: Slack documents one incoming-webhook message per second."""
    burst: int = 10
    """Messages that may go out at once before the rate applies (Slack allows short bursts)."""

    def __post_init__(self) -> None:
        check_kind(self.name, self.kind)
        # The sink's token bucket (ratelimit.py) needs a rate and room for one message.
        if not self.rate_per_minute > 0:
            raise ValueError(f"sink {self.name!r}: rate_per_minute must be more than 0, not {self.rate_per_minute!r}")
        if self.burst < 1:
            raise ValueError(f"sink {self.name!r}: burst must be at least 1, not {self.burst!r}")
        if self.kind == "slack_bot":
            if self.token is None or not self.channel:
                raise ValueError(f"sink {self.name!r} (slack_bot) needs a token and a channel")
        elif self.kind != "console" and self.url is None:
            raise ValueError(f"sink {self.name!r} ({self.kind}) has no URL")
        self.min_severity = Severity(self.min_severity)

    def describe(self) -> str:
        """One line about the sink for people: never the URL."""
        if self.kind == "slack_bot":
            source = f"${self.token_env}" if self.token_env else "the config file"
            return f"{self.name}: slack_bot in {self.channel} (token from {source}), severity >= {self.min_severity.value}"
        where = f" (URL from ${self.url_env})" if self.url_env else (" (URL from the config file)" if self.url else "")
        return f"{self.name}: {self.kind}{where}, severity >= {self.min_severity.value}"


def check_kind(name: str, kind: str) -> None:
    """Refuse a sink kind gapwatch has no sink for, before anything else about the sink is judged
    (a misspelt kind would otherwise be told about the URL it then seems to lack)."""
    if kind not in SINK_KINDS:
        raise ValueError(f"sink {name!r}: unknown sink kind {kind!r} (kinds: {', '.join(SINK_KINDS)})")


@dataclass
class SilenceRule:
    run: str = "*"
    """Glob over run names."""
    detector: str = "*"
    """Glob over detector names."""
    metric: str = "*"
    """Glob over metric keys."""
    max_severity: Severity = Severity.CRITICAL
    """Silence alerts up to and including this severity (critical: all)."""
    until: float | None = None
    """Epoch seconds after which the rule lapses; None: until removed from the config."""
    reason: str = ""
    """Why, for whoever reads the config next."""

    def __post_init__(self) -> None:
        self.max_severity = Severity(self.max_severity)

    def matches(self, item: Detection | Any, now: float | None = None) -> bool:
        """Whether the rule silences `item`: a Detection or an alert (anything with run, detector,
        metric and severity)."""
        if self.until is not None and (time.time() if now is None else now) >= self.until:
            return False
        return (
            fnmatch.fnmatchcase(item.run, self.run)
            and fnmatch.fnmatchcase(item.detector, self.detector)
            and fnmatch.fnmatchcase(item.metric, self.metric)
            and Severity(item.severity).rank <= self.max_severity.rank
        )


@dataclass
class AlertingConfig:
    dashboard_url: str = "http://127.0.0.1:8050"
    """Base URL of the dashboard; alerts link to `<base>/run/<name>?start=<step>&end=<step>`
    (8050 is Dash's default port)."""
    incidents: IncidentConfig = field(default_factory=IncidentConfig)
    """When an incident opens, resolves and may reopen."""
    delivery: DeliveryConfig = field(default_factory=DeliveryConfig)
    """Timeouts, retries and backoff of the outbox."""
    sinks: list[SinkConfig] = field(default_factory=lambda: [SinkConfig("console", "console", Severity.INFO)])
    """Where notifications go; the console alone by default."""
    silences: list[SilenceRule] = field(default_factory=list)
    """Alerts matching any rule are kept in the store but sent nowhere."""

    def __post_init__(self) -> None:
        names = [s.name for s in self.sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"sink names must be unique, got {names}")

    def silenced(self, item: Detection | Any, now: float | None = None) -> bool:
        return any(rule.matches(item, now) for rule in self.silences)

    def sink(self, name: str) -> SinkConfig | None:
        return next((s for s in self.sinks if s.name == name), None)
