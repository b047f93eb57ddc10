"""The watch service's configuration: a YAML or TOML file, then environment variables.

```yaml
poll_interval_s: 1.0
dashboard_url: https://gapwatch.example.org
detectors: [reference_divergence, memorization, spike, nonfinite]     # default: all
detector_params: {spike: {threshold: 7.0}}
incidents: {resolve_after_steps: 128, cooldown_steps: 1000}
delivery: {timeout_s: 5, backoff_max_s: 300}
sinks:
  - {name: console, kind: console, min_severity: info}
  - {name: slack, kind: slack, min_severity: warning}        # URL from $SLACK_WEBHOOK_URL
  - {name: ops, kind: webhook, url_env: OPS_WEBHOOK_URL, min_severity: critical}
  - {name: oncall, kind: slack_bot, channel: C0123456789}    # token from $SLACK_BOT_TOKEN
silences:
  - {run: "ablation-*", detector: spike, until: "2026-12-01T00:00:00Z", reason: known spikes}
```

Webhook URLs are secrets: a sink names the environment variable that holds its URL (`url_env`;
Slack defaults to `SLACK_WEBHOOK_URL`), or the file holds it under `url`. With no file, the console
is the sink, plus Slack when `SLACK_WEBHOOK_URL` is set. A `slack_bot` sink posts through Slack's
Web API with a bot token (`token_env`, default `SLACK_BOT_TOKEN`, or `token`) in `channel`, and
edits one message per incident in place. No message here ever contains a URL or a token.
`GAPWATCH_DASHBOARD_URL` sets the dashboard address alert links use when the file does not.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from monitor.alerting.config import (
    AlertingConfig,
    DeliveryConfig,
    IncidentConfig,
    SilenceRule,
    SinkConfig,
    check_kind,
)
from monitor.alerting.secrets import Secret
from monitor.judging.engine import DetectConfig, DetectionEngine
from monitor.errors import GapwatchError
from monitor.schema import Severity

SLACK_ENV = "SLACK_WEBHOOK_URL"
SLACK_BOT_ENV = "SLACK_BOT_TOKEN"
# Where alert links point when the file does not say (the dashboard's public address).
DASHBOARD_ENV = "GAPWATCH_DASHBOARD_URL"
# The top-level settings that decide what is found (load_judging reads them, and `incidents`).
JUDGING_KEYS = ("detectors", "detector_params", "axis")


@dataclass
class WatchConfig:
    poll_interval_s: float = 1.0
    """Seconds between looks at the store: a flagged step reaches Slack within about this long."""
    catch_up_steps: int = 50_000
    """Steps judged per pass while catching up on a long run (bounds memory; progress is logged)."""
    run_budget_s: float = 0.25
    """Seconds one run may take of a poll: a run with a backlog gets passes of `catch_up_steps`
    until this is spent (at least one), and is caught up over several polls, so the other runs'
    new rows are judged in every poll. A quarter of the default poll interval."""
    state_save_interval_s: float = 5.0
    """Detector state is saved with every alert change, and otherwise at most this often: after a
    crash the service re-judges at most these seconds of rows, which sends nothing twice."""
    lease_s: float = 30.0
    """Seconds a watch worker holds a run without renewing it (it renews every poll): the runs of
    a worker that died are judged by another one within this long. Longer than a slow poll."""
    detect: DetectConfig = field(default_factory=DetectConfig)
    """Which detectors judge the runs and how: the same settings `gapwatch detect` takes (the file's
    top-level `detectors`, `detector_params` and `axis`)."""
    alerting: AlertingConfig = field(default_factory=AlertingConfig)
    """Incidents, delivery, sinks and silences."""


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> WatchConfig:
    """The configuration from `path` (YAML or TOML) and `env` (default: os.environ)."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    where = "the defaults"
    if path is not None:
        where = str(path)
        raw = _read(Path(path))
    try:
        return _build(raw, env)
    except (TypeError, ValueError) as exc:
        raise GapwatchError(f"watch config {where}: {exc}") from None


def load_judging(path: str | Path) -> tuple[DetectConfig, IncidentConfig]:
    """What decides the findings and their incidents in the watch config at `path` (its
    `detectors`, `detector_params`, `axis` and `incidents`), for `gapwatch detect` and `gapwatch
    report` to judge as the watch service does. Sinks are not read: their secrets need not be set
    where a report is written."""
    raw = _read(Path(path))
    try:
        return _detect(raw), _fill(IncidentConfig, raw.get("incidents", {}) or {}, "incidents")
    except (TypeError, ValueError) as exc:
        raise GapwatchError(f"watch config {path}: {exc}") from None


def _detect(raw: Mapping[str, Any]) -> DetectConfig:
    detect = DetectConfig(detectors=_coerce(raw.get("detectors"), "list[str] | None", "detectors"),
                          params=_coerce(raw.get("detector_params") or {}, "dict", "detector_params"),
                          axis=_coerce(raw.get("axis", "auto"), "str", "axis"))
    try:
        DetectionEngine(detect)
    except GapwatchError as exc:  # a bad detector name or setting is an error of the file, in one line
        raise ValueError(str(exc)) from None
    return detect


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GapwatchError(f"cannot read watch config {path}: {exc.strerror}") from None
    try:
        if path.suffix.lower() == ".toml":
            data = tomllib.loads(text)
        elif path.suffix.lower() in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise GapwatchError(f"watch config {path}: use a .yaml, .yml or .toml file")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GapwatchError(f"watch config {path} is not valid {path.suffix[1:].upper()}: {first}") from None
    if not isinstance(data, dict):
        raise GapwatchError(f"watch config {path}: the top level must be a mapping")
    return data


def _build(raw: dict[str, Any], env: Mapping[str, str]) -> WatchConfig:
    raw = dict(raw)
    incidents = _fill(IncidentConfig, raw.pop("incidents", {}) or {}, "incidents")
    delivery = _fill(DeliveryConfig, raw.pop("delivery", {}) or {}, "delivery")
    sinks_raw = raw.pop("sinks", None)
    silences_raw = raw.pop("silences", []) or []
    dashboard_url = raw.pop("dashboard_url", None) or env.get(DASHBOARD_ENV) or AlertingConfig.dashboard_url
    if not isinstance(silences_raw, list):
        raise ValueError("silences must be a list")
    sinks = _sinks(sinks_raw, env)
    silences = [_silence(s, i) for i, s in enumerate(silences_raw)]
    alerting = AlertingConfig(dashboard_url=str(dashboard_url), incidents=incidents, delivery=delivery,
                              sinks=sinks, silences=silences)
    detect = _detect(raw)
    for key in JUDGING_KEYS:
        raw.pop(key, None)
    watch = _fill(WatchConfig, raw, "the top level", exclude=("alerting", "detect"))
    watch.alerting = alerting
    watch.detect = detect
    if watch.poll_interval_s <= 0:
        raise ValueError("poll_interval_s must be positive")
    if watch.lease_s <= watch.poll_interval_s:
        raise ValueError("lease_s must be longer than poll_interval_s (a worker renews its leases every poll)")
    return watch


def _fill(cls, values: Any, where: str, exclude: tuple[str, ...] = ()):
    """An instance of the dataclass `cls` from a mapping, each value checked against its field type."""
    if not isinstance(values, dict):
        raise ValueError(f"{where} must be a mapping")
    known = {f.name: f for f in dataclasses.fields(cls) if f.name not in exclude}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown} in {where}; known: {sorted(known)}")
    return cls(**{name: _coerce(value, str(known[name].type), f"{where}: {name}") for name, value in values.items()})


def _coerce(value: Any, type_text: str, where: str) -> Any:
    optional = type_text.endswith(" | None")
    base = type_text.removesuffix(" | None")
    if value is None and optional:
        return None
    if base in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where} must be a number, not {value!r}")
        if base == "int" and not float(value).is_integer():
            raise ValueError(f"{where} must be a whole number, not {value!r}")
        return int(value) if base == "int" else float(value)
    if base == "str":
        return str(value)
    if base == "Severity":
        try:
            return Severity(value)
        except ValueError:
            raise ValueError(f"{where} must be info, warning or critical, not {value!r}") from None
    if base.startswith("dict") and not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping")
    if base.startswith("list") and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"{where} must be a list of names")
    return value


def _sinks(raw: Any, env: Mapping[str, str]) -> list[SinkConfig]:
    if raw is None:
        sinks = [SinkConfig("console", "console", Severity.INFO)]
        if env.get(SLACK_ENV):
            sinks.append(_sink({"name": "slack", "kind": "slack"}, env))
        return sinks
    if not isinstance(raw, list) or not raw:
        raise ValueError("sinks must be a non-empty list")
    return [_sink(s, env) for s in raw]


def _sink(raw: Any, env: Mapping[str, str]) -> SinkConfig:
    if not isinstance(raw, dict) or "name" not in raw:
        raise ValueError("each sink needs a name")
    raw = dict(raw)
    name = str(raw.pop("name"))
    kind = str(raw.pop("kind", "console"))
    check_kind(name, kind)
    if kind == "slack_bot":
        return _slack_bot_sink(name, raw, env)
    url_env = raw.pop("url_env", SLACK_ENV if kind == "slack" and "url" not in raw else None)
    url_text = raw.pop("url", None)
    allowed = {"min_severity", "rate_per_minute", "burst"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ValueError(f"sink {name!r}: unknown setting(s) {unknown}; known: name, kind, url, url_env, "
                         f"{', '.join(sorted(allowed))}")
    url = None
    if kind != "console":
        if url_env is not None:
            url_text = env.get(str(url_env))
            if not url_text:
                raise ValueError(f"sink {name!r}: environment variable ${url_env} is not set")
        if not url_text:
            raise ValueError(f"sink {name!r}: give url_env (the variable holding the webhook URL) or url")
        if not str(url_text).startswith(("http://", "https://")):
            source = f"${url_env}" if url_env else "url"
            raise ValueError(f"sink {name!r}: the URL in {source} is not an http(s) URL")
        url = Secret(str(url_text))
    try:
        severity = Severity(raw.get("min_severity", "info" if kind == "console" else "warning"))
    except ValueError:
        raise ValueError(f"sink {name!r}: min_severity must be info, warning or critical") from None
    return SinkConfig(name=name, kind=kind, min_severity=severity, url=url,
                      url_env=str(url_env) if url_env and kind != "console" else None,
                      **_limits(name, raw))


def _limits(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A sink's rate_per_minute and burst, checked as numbers (SinkConfig checks their range)."""
    return {key: _coerce(raw.get(key, getattr(SinkConfig, key)), kind, f"sink {name!r}: {key}")
            for key, kind in (("rate_per_minute", "float"), ("burst", "int"))}


def _slack_bot_sink(name: str, raw: dict[str, Any], env: Mapping[str, str]) -> SinkConfig:
    token_env = raw.pop("token_env", SLACK_BOT_ENV if "token" not in raw else None)
    token_text = raw.pop("token", None)
    channel = raw.pop("channel", None)
    api_url = str(raw.pop("api_url", SinkConfig.api_url))
    allowed = {"min_severity", "rate_per_minute", "burst"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ValueError(f"sink {name!r}: unknown setting(s) {unknown}; known: name, kind, token, token_env, channel, "
                         f"api_url, {', '.join(sorted(allowed))}")
    if token_env is not None:
        token_text = env.get(str(token_env))
        if not token_text:
            raise ValueError(f"sink {name!r}: environment variable ${token_env} is not set")
    if not token_text:
        raise ValueError(f"sink {name!r}: give token_env (the variable holding the bot token) or token")
    if not channel:
        raise ValueError(f"sink {name!r}: slack_bot needs a channel")
    if not api_url.startswith(("http://", "https://")):
        raise ValueError(f"sink {name!r}: api_url is not an http(s) URL")
    try:
        severity = Severity(raw.get("min_severity", "warning"))
    except ValueError:
        raise ValueError(f"sink {name!r}: min_severity must be info, warning or critical") from None
    return SinkConfig(name=name, kind="slack_bot", min_severity=severity, token=Secret(str(token_text)),
                      token_env=str(token_env) if token_env else None, channel=str(channel), api_url=api_url,
                      **_limits(name, raw))


def _silence(raw: Any, i: int) -> SilenceRule:
    if not isinstance(raw, dict):
        raise ValueError(f"silence #{i + 1} must be a mapping")
    raw = dict(raw)
    until = raw.pop("until", None)
    if until is not None:
        raw["until"] = _epoch(until, i)
    return _fill(SilenceRule, raw, f"silence #{i + 1}")


def _epoch(value: Any, i: int) -> float:
    """`until` as epoch seconds: a number, an ISO 8601 text, or a YAML/TOML datetime (UTC if naive)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"silence #{i + 1}: until {value!r} is not an ISO 8601 time") from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.timestamp()
    raise ValueError(f"silence #{i + 1}: until must be a time, not {value!r}")
