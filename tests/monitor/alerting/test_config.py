"""The watch config from YAML/TOML and the environment; the webhook URL never shows."""

from __future__ import annotations

import datetime as dt

import pytest

from monitor.errors import GapwatchError
from monitor.schema import Severity
from monitor.watch.config import load_config, load_judging

from .helpers import detection

URL = "https://hooks.slack.com/services/T000/B000/verySecretToken123"

YAML = """
poll_interval_s: 0.5
dashboard_url: https://gapwatch.example.org
detectors: [spike, nonfinite]
detector_params: {spike: {threshold: 7.0}}
incidents: {resolve_after_steps: 64, cooldown_steps: 400, resolve_after_steps_by_detector: {eval_regression: 3000}}
delivery: {timeout_s: 2, backoff_max_s: 60}
sinks:
  - {name: console, kind: console}
  - {name: slack, kind: slack, min_severity: critical, rate_per_minute: 30, burst: 3}
  - {name: ops, kind: webhook, url_env: OPS_HOOK}
silences:
  - {run: "ablation-*", detector: spike, until: "2030-01-01T00:00:00Z", reason: known spikes}
"""

TOML = """
poll_interval_s = 2
[[sinks]]
name = "slack"
kind = "slack"
[[silences]]
metric = "perf/*"
max_severity = "warning"
until = 2030-01-01T00:00:00Z
"""


def test_yaml_config_with_secrets_from_the_environment(tmp_path):
    path = tmp_path / "watch.yaml"
    path.write_text(YAML)
    cfg = load_config(path, env={"SLACK_WEBHOOK_URL": URL, "OPS_HOOK": "http://127.0.0.1:9/ops/abcdefgh123"})
    assert cfg.poll_interval_s == 0.5
    assert cfg.detect.detectors == ["spike", "nonfinite"] and cfg.detect.params == {"spike": {"threshold": 7.0}}
    a = cfg.alerting
    assert a.dashboard_url == "https://gapwatch.example.org"
    assert (a.incidents.resolve_after_steps, a.incidents.cooldown_steps) == (64, 400)
    assert a.incidents.resolve_after("eval_regression") == 3000
    assert a.delivery.timeout_s == 2.0
    slack = a.sink("slack")
    assert slack.url.reveal() == URL and slack.min_severity is Severity.CRITICAL and slack.burst == 3
    assert a.sink("ops").url_env == "OPS_HOOK" and a.sink("console").min_severity is Severity.INFO
    assert a.silences[0].until == dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc).timestamp()
    assert a.silenced(detection(run="ablation-3", detector="spike")) and not a.silenced(detection(detector="spike"))
    shown = repr(cfg) + " ".join(s.describe() for s in a.sinks)
    assert "verySecretToken123" not in shown and "abcdefgh123" not in shown
    assert "URL from $SLACK_WEBHOOK_URL" in slack.describe()


def test_toml_config(tmp_path):
    path = tmp_path / "watch.toml"
    path.write_text(TOML)
    cfg = load_config(path, env={"SLACK_WEBHOOK_URL": URL})
    assert cfg.poll_interval_s == 2.0 and [s.name for s in cfg.alerting.sinks] == ["slack"]
    rule = cfg.alerting.silences[0]
    assert rule.max_severity is Severity.WARNING
    assert cfg.alerting.silenced(detection(metric="perf/mfu", severity=Severity.WARNING))
    assert not cfg.alerting.silenced(detection(metric="perf/mfu", severity=Severity.CRITICAL))


def test_defaults_are_the_console_plus_slack_when_its_variable_is_set():
    defaults = load_config(env={})
    assert [s.name for s in defaults.alerting.sinks] == ["console"] and defaults.detect.detectors is None
    assert defaults.alerting.dashboard_url == "http://127.0.0.1:8050"
    assert load_config(env={"GAPWATCH_DASHBOARD_URL": "https://dash.example"}).alerting.dashboard_url == \
        "https://dash.example"
    sinks = load_config(env={"SLACK_WEBHOOK_URL": URL}).alerting.sinks
    assert [(s.name, s.kind) for s in sinks] == [("console", "console"), ("slack", "slack")]


@pytest.mark.parametrize("text, env, message", [
    ("sinks: [{name: slack, kind: slack}]", {}, "environment variable $SLACK_WEBHOOK_URL is not set"),
    ("sinks: [{name: slack, kind: slack}]", {"SLACK_WEBHOOK_URL": "ftp://verySecretToken123"},
     "the URL in $SLACK_WEBHOOK_URL is not an http(s) URL"),
    ("sinks: [{name: s, kind: pigeon, url: 'http://x/verySecretToken123'}]", {}, "unknown sink kind 'pigeon'"),
    # A misspelt kind is named as such, not taken for a webhook that lacks its URL.
    ("sinks: [{name: s, kind: slak}]", {}, "sink 's': unknown sink kind 'slak' (kinds: console, slack, slack_bot, "
     "webhook)"),
    ("sinks: [{name: c, kind: console, burst: 0}]", {}, "sink 'c': burst must be at least 1, not 0"),
    ("sinks: [{name: c, kind: console, rate_per_minute: fast}]", {}, "sink 'c': rate_per_minute must be a number"),
    ("incidents: {resolve_after_steps: -1}", {}, "incidents: resolve_after_steps must be a whole number, 0 or more, "
     "not -1"),
    ("incidents: {resolve_after_steps_by_detector: {eval_regression: -5}}", {},
     "incidents: resolve_after_steps_by_detector: eval_regression must be a whole number, 0 or more, not -5"),
    ("delivery: {timeout_s: -1}", {}, "delivery: timeout_s must be 0 or more, not -1.0"),
    ("detector_params: {spike: {threshold: abc}}", {},
     "detector settings: threshold of detector spike must be a finite number, not 'abc'"),
    ("detector_params: {spike: {treshold: 3}}", {},
     "unknown parameter 'treshold' of detector spike; its parameters: metrics, definition, threshold, "),
    ("detector_params: {spike: {center_window: -1}}", {},
     "center_window of detector spike must be a count (1 or more), not -1"),
    # A window of none would divide by zero halfway through judging; a cool-down of none is fine.
    ("detector_params: {throughput: {block_points: 0}}", {},
     "block_points of detector throughput must be a count (1 or more), not 0"),
    ("detector_params: {spike: {recovery_points: -1}}", {},
     "recovery_points of detector spike must be a count (0 or more), not -1"),
    ("detector_params: {spike: {center_window: 2.5}}", {}, "center_window of detector spike must be a whole number"),
    ("detector_params: {spike: {metrics: train/loss}}", {}, "metrics of detector spike must be a list of names"),
    ("detector_params: {spike: {threshold: .nan}}", {}, "threshold of detector spike must be a finite number"),
    # A negative threshold would flag every value; a negative tolerance, none.
    ("detector_params: {spike: {threshold: -6}}", {}, "threshold of detector spike must be a number (0 or more), "
     "not -6"),
    ("detector_params: {eval_regression: {within_run: 1}}", {}, "within_run of detector eval_regression must be true "
     "or false, not 1"),
    ("detector_params: {data_invariants: {global_batch_size: many}}", {},
     "global_batch_size of detector data_invariants must be a whole number or null, not 'many'"),
    ("detector_params: {spike: 5}", {}, "the parameters of detector spike must be a mapping, not 5"),
    ("poll_interval: 3", {}, "unknown setting(s) ['poll_interval']"),
    ("incidents: {cooldown_steps: lots}", {}, "incidents: cooldown_steps must be a number"),
    ("sinks: [{name: c, kind: console, min_severity: loud}]", {}, "min_severity must be info, warning or critical"),
    ("silences: [{until: yesterday}]", {}, "until 'yesterday' is not an ISO 8601 time"),
    ("poll_interval_s: [1", {}, "is not valid YAML"),
    ("detectors: spike", {}, "detectors must be a list of names"),
    ("sinks: [{name: bot, kind: slack_bot, channel: C1}]", {}, "environment variable $SLACK_BOT_TOKEN is not set"),
    ("sinks: [{name: bot, kind: slack_bot}]", {"SLACK_BOT_TOKEN": "xoxb-verySecretToken123"},
     "slack_bot needs a channel"),
    ("sinks: [{name: bot, kind: slack_bot, channel: C1, url: 'http://x'}]",
     {"SLACK_BOT_TOKEN": "xoxb-verySecretToken123"}, "unknown setting(s) ['url']"),
])
def test_bad_config_is_one_clear_line_without_the_url(tmp_path, text, env, message):
    path = tmp_path / "watch.yaml"
    path.write_text(text)
    with pytest.raises(GapwatchError) as err:
        load_config(path, env=env)
    line = str(err.value)
    assert message in line and str(path) in line and "\n" not in line
    assert "verySecretToken123" not in line


def test_a_slack_bot_sink_takes_its_token_from_the_environment_and_never_shows_it(tmp_path):
    path = tmp_path / "watch.yaml"
    path.write_text("sinks: [{name: oncall, kind: slack_bot, channel: '#ml-alerts', api_url: 'http://127.0.0.1:9/api/'}]")
    (sink,) = load_config(path, env={"SLACK_BOT_TOKEN": "xoxb-verySecretToken123"}).alerting.sinks
    assert (sink.kind, sink.channel, sink.api_url, sink.min_severity) == (
        "slack_bot", "#ml-alerts", "http://127.0.0.1:9/api/", Severity.WARNING)
    assert sink.token.reveal() == "xoxb-verySecretToken123"
    assert sink.describe() == "oncall: slack_bot in #ml-alerts (token from $SLACK_BOT_TOKEN), severity >= warning"
    assert "verySecretToken123" not in repr(sink)


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(GapwatchError, match="cannot read watch config"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "w.ini").write_text("x")
    with pytest.raises(GapwatchError, match="use a .yaml, .yml or .toml file"):
        load_config(tmp_path / "w.ini")


@pytest.mark.parametrize("text, message", [
    ("detector_params: {spike: {threshold: abc}}", "threshold of detector spike must be a finite number"),
    ("incidents: {cooldown_steps: -10}", "incidents: cooldown_steps must be a whole number, 0 or more"),
])
def test_detect_and_report_read_the_judging_settings_as_strictly(tmp_path, text, message):
    path = tmp_path / "watch.yaml"
    path.write_text(text)
    with pytest.raises(GapwatchError, match=message):
        load_judging(path)


def test_detector_parameters_of_the_fields_types_are_taken(tmp_path):
    path = tmp_path / "watch.yaml"
    path.write_text("detector_params: {spike: {threshold: 7, metrics: [train/loss], center_window: 16},"
                    " data_invariants: {global_batch_size: null, records_per_epoch: 1000},"
                    " resume: {deterministic: true}, eval_regression: {within_run: false}}")
    detect, _ = load_judging(path)
    assert detect.params["spike"] == {"threshold": 7, "metrics": ["train/loss"], "center_window": 16}
