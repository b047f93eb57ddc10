"""wandb://entity/project/run_id through wandb's public API, against a real HTTP stand-in of the
W&B GraphQL endpoint on 127.0.0.1; and a dead server, which must be reported as such, fast."""

from __future__ import annotations

import socket
import time

import numpy as np
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


def test_a_step_key_the_server_keeps_from_define_metric_is_the_step_axis(server):
    """The server keeps a run's define_metric declarations expanded in its config (`_wandb.m`: the
    metric's name, its step metric by place in that list), as W&B writes them."""
    rows = [{"_step": s, "_timestamp": 1.7e9 + s, "opt_step": 8 * (s + 1), "train/loss": 3.0 - s / 100}
            for s in range(6)]
    declared = {"m": [{"1": "opt_step", "6": [3]}, {"1": "train/loss", "5": 1, "6": [1]}]}
    server.add_run(StandInRun("ai2", "olmo", "d1", "d", {"lr": 1e-3, "_wandb": declared}, rows=rows,
                              state="finished"))
    run = load("wandb://ai2/olmo/d1", api_config=_config(server))
    assert run.scalars["step"].tolist() == [8, 16, 24, 32, 40, 48] and run.config == {"lr": 1e-3}
    assert {r["source"]: r["reason"] for r in run.mapping}["opt_step"] == \
        "the trainer's step (declared by define_metric)"
    # A config whose `_wandb` declares nothing of this shape leaves W&B's row counter as the axis.
    server.add_run(StandInRun("ai2", "olmo", "d2", "d", {"_wandb": {"m": "?"}}, rows=rows, state="finished"))
    assert load("wandb://ai2/olmo/d2", api_config=_config(server)).scalars["step"].max() == 5


# --- what a broken or hostile server answers ---------------------------------------------------
@pytest.mark.parametrize("rows, message", [
    (['{"_step": "x", "loss": 1}'], "a history row has _step 'x', not a whole number"),
    (['{"_step": null, "loss": 1}'], "a history row has _step None, not a whole number"),
    (['{"_step": true, "loss": 1}'], "a history row has _step True, not a whole number"),
    (['{"_step": -1, "loss": 1}'], "a history row has _step -1, not a whole number"),
    # wandb's own reader wraps a step beyond 2**63 to a negative one: refused, never stored so.
    (['{"_step": %d, "loss": 1}' % 2**70], "has _step -9223372036854775808, not a whole number"),
    (['{"_step": 0, "loss": 1}', '{"_step": 0, "loss": 2}'], "step 0 after step 0: W&B steps only grow"),
    (['{"_step": 0, ' + '"a": {' * 40 + '"b": 1' + '}' * 41], "step 0: a value nested more than 32 levels deep"),
    (['[1, 2]'], "reading history failed: "),
    (['{nope'], "reading history failed: "),
])
def test_a_broken_history_ends_in_one_line(server, rows, message):
    server.add_run(StandInRun("ai2", "olmo", "bad", "bad", {}, rows=[{"_step": 0}],
                   raw_history=rows))
    with pytest.raises(GapwatchError) as err:
        load("wandb://ai2/olmo/bad", api_config=_config(server))
    text = str(err.value)
    assert message in text and "\n" not in text and text.startswith("wandb://ai2/olmo/bad: ")


def test_odd_values_from_the_server_are_kept_left_out_or_refused(server):
    long_name = "m" * 5_000_000
    server.add_run(StandInRun("ai2", "olmo", "odd", "odd", {}, rows=[{"_step": 1}], raw_history=[
        '{"_step": 0, "_timestamp": %s, "train/loss": %d, "acc": true, "t": "abc", "%s": [1]}'
        % ("9" * 400, 2**80, long_name),
        '{"_step": 1, "train/loss": "Infinity", "x": NaN}',
    ]))
    run = load("wandb://ai2/olmo/odd", api_config=_config(server))
    data = run.to_run_data("odd")
    assert data.series(schema.TRAIN_LOSS).to_dict() == {0: float(2**80), 1: float("inf")}
    assert data.series("extra/acc").dropna().to_dict() == {0: 1.0}
    assert np.isnan(run.scalars["wall_time"]).all()  # a timestamp beyond a float is no time
    (skipped,) = [n for n in run.notes if "not numbers" in n]
    assert "t (1)" in skipped and "(5,000,000 characters) (1)" in skipped and len(skipped) < 400


def test_a_run_record_of_the_wrong_shape(server):
    def answer(query, plain=server.answer):
        status, data = plain(query)
        run = (data.get("data") or {}).get("project", {}).get("run") or {}
        if "config" in run:
            run["config"] = "[1, 2"  # not JSON
        return status, data

    server.answer = answer
    with pytest.raises(GapwatchError, match=r"^wandb://ai2/olmo/ref123: the server's answer for "
                                            r"the run could not be read: "):
        load(URL, api_config=_config(server))


def test_a_server_that_keeps_failing_is_given_up_on(server):
    def fail_history(query, plain=server.answer):
        if "HistoryPage" in (query.get("operationName") or query.get("query", "")):
            return 500, {"errors": [{"message": "boom"}]}
        return plain(query)

    server.answer = fail_history
    config = ApiConfig(base_url=server.url, api_key="k" * 40, retries=1, retry_wait_max_s=0.2)
    with pytest.raises(GapwatchError, match=r"reading history failed: .*HTTP 500"):
        load(URL, api_config=config)
