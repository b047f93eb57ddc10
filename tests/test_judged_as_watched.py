"""`gapwatch detect --config` and `gapwatch report --config` judge a run with the watch service's
settings (detectors, detector_params, axis, incidents), so they tell what its alerts told: a team
that raised a noise floor for its scale must not read a finding in the report that the watch
service, rightly, never raised."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from app.cli import main
from bench.bench_stories import long_rows
from bench.quality import stories
from monitor.store import open_store

STEPS = 30_000
# Held-out loss 0.1 nats above the reference is a divergence at the default between-run noise (0.2%
# of the loss); a team whose seeds differ by 5% of it sets that floor, and then it is not.
FLOOR = "heldout_divergence: {noise_level: 0.05}"


def store_with(tmp_path, run) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        store.ensure_run("reference")
        store.write_metrics("reference", long_rows(stories.reference(STEPS)))
        store.ensure_run(run.name, reference="reference")
        store.write_metrics(run.name, long_rows(run))
    return url


def json_out(args: list[str]) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    return json.loads(out.getvalue())


def config_file(tmp_path, text: str) -> str:
    path = tmp_path / "watch.yaml"
    path.write_text(text)
    return str(path)


def heldout_incidents(incidents: list[dict]) -> list[dict]:
    return [i for i in incidents if i["detector"] == "heldout_divergence"]


def test_detect_and_report_with_the_watch_config_find_what_the_watch_service_found(tmp_path, capsys):
    url = store_with(tmp_path, stories.worse(STEPS))
    config = config_file(tmp_path, f"detectors: [heldout_divergence]\ndetector_params:\n  {FLOOR}\n")
    # By default the worse run's held-out loss diverged: the floor is what makes the difference.
    by_default = json_out(["detect", "--run", "worse", "--store", url, "--detectors", "heldout_divergence",
                           "--json", "--no-write"])
    assert heldout_incidents(by_default)
    watched = json_out(["watch", "--run", "worse", "--store", url, "--once", "--config", config, "--json"])
    assert heldout_incidents(watched) == []
    assert json_out(["detect", "--run", "worse", "--store", url, "--config", config, "--json", "--no-write"]) == []
    capsys.readouterr()
    report = report_json(["--run", "worse", "--store", url, "--config", config], capsys)
    assert report["verdict"]["kind"] in ("tied", "tied_with_caveats"), report["verdict"]["sentence"]
    assert not [r for r in report["tables"]["findings"]["rows"] if r["run"] == "worse"]
    # Without the config the same report names the divergence.
    assert "diverged" in report_json(["--run", "worse", "--store", url], capsys)["verdict"]["kind"]


def report_json(args: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(["report", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_detect_groups_findings_with_the_watch_configs_incident_settings(tmp_path):
    url = store_with(tmp_path, stories.spike_burst(STEPS))
    args = ["detect", "--run", "spike-burst", "--store", url, "--detectors", "spike", "--json", "--no-write"]
    (burst,) = json_out(args)
    assert burst["state"] == "resolved"  # the burst ended and the loss ran clean for long enough
    # A team that wants a spike incident kept open for a million clean steps gets that, as in watch.
    config = config_file(tmp_path, "incidents: {resolve_after_steps: 1000000}\n")
    (kept,) = json_out(args + ["--config", config])
    assert kept["state"] == "open" and kept["incident_id"] == burst["incident_id"]


@pytest.mark.parametrize("text, says", [
    ("detector_params:\n  heldout_divergance: {noise_level: 0.05}\n", "unknown detector(s) heldout_divergance"),
    ("detector_params:\n  spike: {thresh: 3}\n", "thresh"),
    ("incidents: {resolve_after: 3}\n", "unknown setting(s) ['resolve_after'] in incidents"),
])
def test_a_config_whose_settings_would_change_nothing_is_one_clear_error(tmp_path, capsys, text, says):
    url = f"sqlite:///{tmp_path / 'no-such-store.db'}"  # the config is read first
    config = config_file(tmp_path, text)
    for command in (["detect", "--no-write"], ["report", "-o", str(tmp_path / "r.md")]):
        assert main([command[0], "--run", "clean", "--store", url, "--config", config, *command[1:]]) == 2
        err = capsys.readouterr().err
        assert f"watch config {config}" in err and says in err
