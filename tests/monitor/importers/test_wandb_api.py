"""wandb://entity/project/run_id through wandb's public API, against a real HTTP stand-in of the
W&B GraphQL endpoint on 127.0.0.1; and a dead server, which must be reported as such, fast."""

from __future__ import annotations

import socket
import time

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.follow import FollowConfig, follow
from monitor.importers.wandb.api import ApiConfig, WandbApiReader, probe
from monitor.store import open_store

from .wandb_standin import StandInRun, WandbStandIn

URL = "wandb://ai2/olmo/ref123"


def _rows(lo, hi):
    return [{"_step": s, "_timestamp": 1.7e9 + s, "train/CE loss": 3.0 - s * 1e-4,
             "optim/learning_rate_group0": 1e-4,
             "media": {"_type": "image-file", "path": "x.png"}} for s in range(lo, hi)]


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    with WandbStandIn() as srv:
        srv.add_run(StandInRun("ai2", "olmo", "ref123", "OLMo-ref", {"lr": 4e-4},
                               {"train/CE loss": 2.75, "_step": 2499}, rows=_rows(0, 2500)))
        yield srv


def _config(srv, page=1000):
    return ApiConfig(base_url=srv.url, api_key="k" * 40, page_size=page)


def test_history_paged_through_the_public_api(server):
    run = load(URL, api_config=_config(server, page=1000))
    assert run.profile == "olmo" and run.name_hint == "OLMo-ref" and run.live
    data = run.to_run_data("ref")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(2500)) and loss.loc[2000] == pytest.approx(2.8)
    assert run.config == {"lr": 4e-4} and run.summary == {"train/CE loss": 2.75}
    assert any("media (2500)" in n for n in run.notes)
    # 2,500 steps in pages of 1,000: three history pages.
    assert server.operations().count("HistoryPage") == 3


def test_follow_polls_until_the_run_finishes(server, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    run = server.runs[("ai2", "olmo", "ref123")]
    polls = []

    def grow(_seconds):
        # Between polls the run logs 500 more steps, then finishes.
        if len(run.rows) < 3500:
            run.rows.extend(_rows(len(run.rows), len(run.rows) + 500))
        else:
            run.state = "finished"

    last = follow(store, "ref", URL, "wandb-api",
                  config=FollowConfig(poll_interval_s=0, max_polls=10),
                  api_config=_config(server), on_poll=polls.append, sleep=grow)
    assert last.finished and [p.rows_new for p in polls] == [5000, 1000, 1000, 0]
    data = store.load_run("ref")
    assert data.scalars.index.max() == 3499 and len(data.series(schema.TRAIN_LOSS)) == 3500
    assert store.get_run("ref")["status"] == "imported"
    # Following again starts after the last imported step and finds nothing new.
    again = follow(store, "ref", URL, "wandb-api", config=FollowConfig(max_polls=1),
                   api_config=_config(server))
    assert again.rows_new == 0 and again.finished
    store.close()


def test_missing_run(server):
    with pytest.raises(GapwatchError, match="no such run on the server"):
        load("wandb://ai2/olmo/nope", api_config=_config(server))


def test_bad_url():
    with pytest.raises(GapwatchError, match="expected wandb://entity/project/run_id"):
        load("wandb://only-two/parts")


def test_dead_server_is_reported_as_unreachable_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    start = time.monotonic()
    with pytest.raises(GapwatchError, match=r"unreachable: connection refused") as err:
        WandbApiReader(URL, ApiConfig(base_url=f"http://127.0.0.1:{port}")).read()
    assert "credentials" not in str(err.value)
    assert time.monotonic() - start < 60  # bounded by the probe, not by wandb's retries


def test_silent_server_times_out_in_the_probe():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts the connection, never answers
        with pytest.raises(GapwatchError, match=r"unreachable: no answer within 0.5 s"):
            probe(f"http://127.0.0.1:{s.getsockname()[1]}", timeout_s=0.5)


def test_server_error_status(server):
    def fail(query):
        return 503, {"errors": [{"message": "maintenance"}]}

    server.answer = fail
    with pytest.raises(GapwatchError, match="answered HTTP 503"):
        probe(server.url, timeout_s=5)


def test_follow_puts_a_server_run_on_its_own_step(server, tmp_path):
    """An HF-style run on the server (W&B's `_step` 0, 1, 2...; the trainer's
    `train/global_step` 10, 20, 30...), followed while it grows: stored on the trainer's step."""
    def hf_rows(lo, hi):
        return [{"_step": s, "_timestamp": 1.7e9 + s, "train/loss": 3.0 - s / 100,
                 "train/global_step": 10 * (s + 1)} for s in range(lo, hi)]

    run = server.add_run(StandInRun("ai2", "olmo", "hf1", "hf", {}, rows=hf_rows(0, 5)))

    def grow(_seconds):
        if len(run.rows) < 15:
            run.rows.extend(hf_rows(len(run.rows), len(run.rows) + 5))
        else:
            run.state = "finished"

    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        last = follow(store, "hf", "wandb://ai2/olmo/hf1", "wandb-api",
                      config=FollowConfig(poll_interval_s=0, max_polls=10),
                      api_config=_config(server), sleep=grow)
        assert last.finished
        loss = store.load_run("hf").series(schema.TRAIN_LOSS)
        assert list(loss.index) == list(range(10, 151, 10))
        assert loss.loc[150] == pytest.approx(3.0 - 14 / 100)
    finally:
        store.close()
