"""Meta's lingua: the dump folder of a training job, written as its source writes it (its
MetricLogger prints `json.dumps` of the flattened metrics with `created_at`; its evaluation jobs
append `timestamp | results`, lm-eval's results here computed by the real harness). Before, the
folder was "unrecognised format", and its files one by one came in under their own names: no
training loss, no held-out loss, no downstream evals."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from app.cli import main
from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load
from monitor.store import open_store

from .lm_eval_tiny import tiny_results

START = datetime(2026, 12, 1, tzinfo=timezone.utc)
EVAL_EVERY = 250
GPUS = 8
BATCH, SEQ_LEN = 4, 4096


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}/") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _train_line(step: int, *, loss: float, at: datetime) -> str:
    """One line of metrics.jsonl as lingua's train loop builds it and MetricLogger.log prints it."""
    metrics = _flatten({
        "global_step": step, "acc_step": 0,
        "speed": {"wps": 9.0e3, "FLOPS": 2.5e14, "curr_iter_time": 0.45, "data_load_time": 0.002},
        "optim": {"grad_norm": 0.6, "lr": 3e-4, "total_tokens": GPUS * step * BATCH * SEQ_LEN},
        "memory": {"max_active_gib": 41.0, "max_active_pct": 51.0, "max_reserved_gib": 44.0,
                   "max_reserved_pct": 55.0, "num_alloc_retries": 0, "num_ooms": 0, "power_draw": 612_000},
    })
    metrics["loss/out"] = loss
    metrics["created_at"] = at.isoformat()
    return json.dumps(metrics) + "\n"


def _eval_lines(step: int, results: dict, at: datetime) -> tuple[str, str]:
    """Its evaluation job's lines: per held-out source, and lm-eval's results (created_at written
    by `datetime.utcnow().isoformat()`: no offset)."""
    stamp = {"created_at": at.replace(tzinfo=None).isoformat(), "global_step": step}
    validation = {"c4": {"nll": 3300.0, "nll_per_token": 3.2 + 20 / step ** 0.5, "nll_per_char": 0.8,
                         "avg_seqlen": 1024.0}}
    return json.dumps(stamp | validation) + "\n", json.dumps(stamp | results) + "\n"


@pytest.fixture(scope="module")
def lm_eval_results(tmp_path_factory) -> dict:
    return tiny_results(tmp_path_factory.mktemp("lm_eval"))["results"]


def _write_job(dump, results, *, steps, evals, first: datetime = START) -> datetime:
    """Train `steps` (a log every 10), evaluating the checkpoints `evals` as it reaches them;
    appends, as lingua does. Returns the time after the last line."""
    dump.mkdir(exist_ok=True)
    at = first
    with open(dump / "metrics.jsonl", "a") as train, open(dump / "metrics.validation.jsonl", "a") as val, \
            open(dump / "metrics.eval.jsonl", "a") as down:
        for step in steps:
            at += timedelta(seconds=5)
            train.write(_train_line(step, loss=3.0 + 20 / step ** 0.5, at=at))
            if step in evals:
                a, b = _eval_lines(step, results, at + timedelta(seconds=1))
                val.write(a)
                down.write(b)
    return at + timedelta(seconds=5)


def test_a_dump_folder_is_one_run_with_its_meaning(tmp_path, sqlite_url, lm_eval_results):
    dump = tmp_path / "llama_1b"
    _write_job(dump, lm_eval_results, steps=range(10, 1001, 10), evals=range(EVAL_EVERY, 1001, EVAL_EVERY))
    assert detect_format(dump) == "lingua"
    run = load(dump)
    assert run.profile == "lingua" and run.name_hint == "llama_1b"
    data = run.to_run_data("l")
    assert list(data.series(schema.TRAIN_LOSS).dropna().index) == list(range(10, 1001, 10))
    held = data.series(schema.heldout_key("c4")).dropna()
    assert list(held.index) == [250, 500, 750, 1000]
    assert held.loc[250] == pytest.approx(3.2 + 20 / 250 ** 0.5)
    acc = schema.downstream_key("tiny_choice", "acc")
    assert data.series(acc).dropna().to_dict() == {s: 0.5 for s in (250, 500, 750, 1000)}
    assert data.series(schema.downstream_key("tiny_choice", "acc", "stderr")).dropna().iloc[0] > 0
    assert data.series(schema.TRAIN_TOKENS).dropna().iloc[-1] == GPUS * 1000 * BATCH * SEQ_LEN
    assert data.series("perf/device_tflops_per_s").dropna().iloc[0] == pytest.approx(250.0)
    assert data.series("system/gpu_power_w").dropna().iloc[0] == pytest.approx(612.0)
    assert "acc_step" not in run.key_map and run.attempts == 1
    assert not any("created_at" in n or "alias" in n for n in run.key_map)
    # Through the command line, as a person imports it: one run, read back from the store.
    assert main(["import", str(dump), "--store", sqlite_url]) == 0
    with open_store(sqlite_url) as store:
        stored = store.load_run("llama_1b")
        assert list(stored.series(schema.heldout_key("c4")).dropna().index) == [250, 500, 750, 1000]
        assert stored.series(schema.TRAIN_LOSS).dropna().index[-1] == 1000


def test_a_folder_read_while_the_job_runs_takes_up_where_it_stopped(tmp_path, sqlite_url, lm_eval_results):
    """A requeued job appends steps it logged already (a restart), and an evaluation job finishes
    after later training steps were logged, for an earlier checkpoint than the last one."""
    dump = tmp_path / "job"
    at = _write_job(dump, lm_eval_results, steps=range(10, 601, 10), evals=(250,))
    with open_store(sqlite_url) as store:
        assert main(["import", str(dump), "--store", sqlite_url]) == 0
        # Preempted after 600, requeued from the checkpoint at 500; the evaluation of 500 ends now.
        at = _write_job(dump, lm_eval_results, steps=range(510, 801, 10), evals=(750,), first=at)
        a, b = _eval_lines(500, lm_eval_results, at)
        (dump / "metrics.validation.jsonl").open("a").write(a)
        (dump / "metrics.eval.jsonl").open("a").write(b)
        assert main(["import", str(dump), "--store", sqlite_url]) == 0
        assert main(["import", str(dump), "--store", sqlite_url]) == 0  # nothing new: nothing changes
        whole = load(dump).to_run_data("whole")
        stored = store.load_run("job")
    assert list(stored.series(schema.heldout_key("c4")).dropna().index) == [250, 500, 750]
    train = stored.series(schema.TRAIN_LOSS).dropna()
    assert list(train.index) == list(range(10, 801, 10))
    assert train.equals(whole.series(schema.TRAIN_LOSS).dropna())
    assert [(int(e.step), e.kind) for e in stored.events.itertuples()] == [(510, schema.EventKind.RESTART.value)]


def test_evaluations_out_of_step_order_are_no_restart(tmp_path, lm_eval_results):
    dump = tmp_path / "job"
    _write_job(dump, lm_eval_results, steps=range(10, 1001, 10), evals=())
    lines = [_eval_lines(step, lm_eval_results, START + timedelta(seconds=i)) for i, step in
             enumerate((500, 250, 1000))]
    again = json.loads(_eval_lines(250, lm_eval_results, START + timedelta(seconds=9))[0])
    again["c4"]["nll_per_token"] = 4.0  # checkpoint 250 evaluated again: the line written last wins
    (dump / "metrics.validation.jsonl").write_text("".join(a for a, _ in lines) + json.dumps(again) + "\n")
    (dump / "metrics.eval.jsonl").write_text("".join(b for _, b in lines))
    run = load(dump)
    assert run.attempts == 1 and run.events == []
    held = run.to_run_data("l").series(schema.heldout_key("c4")).dropna()
    assert list(held.index) == [250, 500, 1000] and held.loc[250] == 4.0


def test_a_training_file_alone_and_an_evaluation_file_alone(tmp_path, lm_eval_results):
    dump = tmp_path / "job"
    _write_job(dump, lm_eval_results, steps=range(10, 501, 10), evals=(250, 500))
    # The training file is a JSON Lines log whose names say it is lingua's.
    train = load(dump / "metrics.jsonl")
    assert detect_format(dump / "metrics.jsonl") == "jsonl" and train.profile == "lingua"
    assert train.to_run_data("t").series(schema.TRAIN_LOSS).dropna().index[-1] == 500
    assert detect_format(dump / "metrics.eval.jsonl") == "lingua"
    down = load(dump / "metrics.eval.jsonl").to_run_data("d")
    assert list(down.series(schema.downstream_key("tiny_choice", "acc")).dropna().index) == [250, 500]
    # A folder without its evaluation files says so.
    (dump / "metrics.eval.jsonl").unlink()
    (dump / "metrics.validation.jsonl").unlink()
    assert any("no evaluation files" in n for n in load(dump).notes)


def test_a_folder_of_another_metrics_jsonl_is_not_claimed_and_says_what_imports(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"global_step": 1, "loss": 2.0}) + "\n")
    (folder / "notes.txt").write_text("lr sweep, second try\n")
    with pytest.raises(GapwatchError, match=r"unrecognised format \(no importer reads this folder as one run; "
                       r"files in it that import on their own: metrics.jsonl \(jsonl\)\)"):
        detect_format(folder)
