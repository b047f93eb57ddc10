"""The seed's own scenario through the command line, as a new user meets it: train loss 0.05 nats
below the reference from 64% of the run on, held-out loss and 20 downstream tasks tied, evals every
1,000 steps (bench/quality/stories.py), fed to `gapwatch watch --once` in six growing pieces with a
JSON webhook on loopback, then judged whole by `gapwatch detect`."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from app.cli import main
from bench.bench_stories import long_rows
from bench.quality import stories
from monitor.store import open_store

STEPS = 60_000
PIECES = 6


def watch_in_pieces(url: str, run, reference, config: str) -> list[dict]:
    """The open alerts `watch --once --json` reports after the last piece."""
    with open_store(url) as store:
        store.ensure_run("reference")
        store.write_metrics("reference", long_rows(reference))
        store.ensure_run(run.name, reference="reference")
    rows = long_rows(run)
    edges = np.linspace(0, int(rows["step"].max()), PIECES + 1).astype(int)
    for lo, hi in zip(edges[:-1], edges[1:]):
        with open_store(url) as store:
            store.write_metrics(run.name, rows[(rows["step"] > lo) & (rows["step"] <= hi)])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["watch", "--run", run.name, "--store", url, "--once", "--config", config, "--json"]) == 0
    return json.loads(out.getvalue())


def detect(url: str, run: str) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["detect", "--run", run, "--store", url, "--json", "--no-write"]) == 0
    return json.loads(out.getvalue())


@pytest.fixture
def hook_config(tmp_path, receiver):
    path = tmp_path / "watch.yaml"
    path.write_text(f"sinks: [{{name: hook, kind: webhook, min_severity: info, url: '{receiver.url('/hook')}'}}]\n")
    return str(path)


@pytest.mark.slow
def test_a_memorizing_run_is_one_memorization_incident_that_never_flaps(tmp_path, receiver, hook_config):
    url = f"sqlite:///{tmp_path / 'memorizing.db'}"
    still_open = watch_in_pieces(url, stories.memorizing(STEPS), stories.reference(STEPS), hook_config)
    sent = [r.body for r in receiver.deliveries()]
    kinds = [n["kind"] for n in sent]
    assert 1 <= kinds.count("opened") <= 3 and kinds.count("resolved") == 0, kinds
    (alert,) = still_open
    assert alert["story"] == "memorization" and alert["detector"] == "memorization"
    evidence = alert["evidence"]
    assert evidence["train_delta"] < 0 and evidence["train_z"] < -3  # the train gap
    assert evidence["heldout"] == "tied"  # the held-out tie
    assert abs(evidence["downstream_z"]) < 3  # the downstream tie
    assert "train loss below the reference" in evidence["also"]
    # Every notification speaks of that one incident, under the id `detect` gives it.
    assert {n["incident_id"] for n in sent} == {alert["incident_id"]}
    listed = detect(url, "memorizing")
    assert 1 <= len(listed) <= 3
    (same,) = [i for i in listed if i["story"] == "memorization"]
    assert same["incident_id"] == alert["incident_id"] and same["name"] == alert["name"] and same["state"] == "open"


@pytest.mark.slow
def test_a_clean_seed_pair_sends_nothing(tmp_path, receiver, hook_config):
    url = f"sqlite:///{tmp_path / 'clean.db'}"
    assert watch_in_pieces(url, stories.clean(STEPS), stories.reference(STEPS), hook_config) == []
    assert receiver.all() == []
    assert detect(url, "clean") == []
