"""A Levanter job's runs, read with no flags: its console log when the tracker is the JSON logger
(lines written through Python logging as Levanter's JsonLoggerTracker writes them: one JSON object
a `tracker.log` call), and its TensorBoard folder; the `levanter` profile gives the names of its
trainer callbacks, its tagged evaluator and its lm-eval callback their meaning in both."""

from __future__ import annotations

import io
import json
import logging
import math

import pytest

from monitor import schema
from monitor.importers import detect_format, load

C4 = schema.heldout_key("paloma_c4_en")
HELLASWAG = schema.downstream_key("hellaswag", "acc")


class LevanterLog:
    """Records as Levanter's JSON logger tracker emits them, through a logger with a usual prefix."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        handler = logging.StreamHandler(self.stream)
        handler.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
        self.logger = logging.Logger("levanter.json_logger")
        self.logger.addHandler(handler)
        self.logger.setLevel(logging.INFO)

    def record(self, event: str, **fields) -> None:
        self.logger.info(json.dumps({"tracker": "json_logger", "event": event, **fields}))

    def log(self, metrics: dict, step: int | None) -> None:
        self.record("log", step=step, metrics=metrics)

    def line(self, text: str) -> None:
        self.logger.info(text)


def _loss(step: int) -> float:
    return 2.5 + 6.0 * (step + 10) ** -0.3


def _training(log: LevanterLog, steps, eval_every: int = 100) -> None:
    """What a Levanter trainer logs: its step info and performance callbacks every step, the tagged
    evaluator and the lm-eval harness callback (which logs with no step) at each evaluation."""
    for step in steps:
        log.log({"train/loss": _loss(step), "global_step": step, "run_progress": step / 1000}, step)
        log.log({"optim/learning_rate": 3e-4, "optim/weight_decay": 0.1}, step)
        log.log({"throughput/total_tokens": (step + 1) * 4096, "throughput/examples_per_second": 8.0,
                 "throughput/tokens_per_second": 32768.0, "throughput/duration": 0.125, "throughput/mfu": 40.0}, step)
        if step % eval_every == 0 and step:
            log.log({"eval/loss": _loss(step) + 0.1, "eval/macro_loss": _loss(step) + 0.12, "eval/loading_time": 0.5,
                     "eval/total_time": 3.0, "eval/paloma/c4_en/loss": _loss(step) + 0.05,
                     "eval/paloma/m2d2_wiki/loss": _loss(step) + 0.2, "eval/paloma/macro_loss": _loss(step) + 0.125,
                     "eval/paloma/micro_loss": _loss(step) + 0.1, "eval/bpb": 0.9, "eval/paloma/c4_en/bpb": 0.88}, step)
            log.log({"lm_eval/hellaswag/acc": 0.3 + step / 1e5, "lm_eval/hellaswag/acc_stderr": 0.004,
                     "lm_eval/hellaswag/alias": "hellaswag", "lm_eval/averages/macro_avg_acc": 0.3}, None)


def test_a_levanter_console_log_reads_with_its_profile(tmp_path):
    log = LevanterLog()
    log.line("Starting training")
    log.record("hparams", hparams={"trainer": {"train_batch_size": 8}, "model": {"seq_len": 512}})
    _training(log, range(0, 301))
    log.log({"grad/histogram/layer0": {"min": -1.0, "max": 1.0, "num": 10, "sum": 0.0, "sum_squares": 3.0,
                                       "bucket_limits": [0.0, 1.0], "bucket_counts": [5, 5]}}, 300)
    log.record("summary", metrics={"throughput/device_kind": "TPU v4"})
    log.record("finish", summary={"train/loss": _loss(300)})
    path = tmp_path / "train.log"
    path.write_text(log.stream.getvalue())
    assert detect_format(path) == "levanter-log"
    run = load(path)
    assert run.profile == "levanter"
    data = run.to_run_data("levanter")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(0, 301))
    assert data.series(schema.TRAIN_LOSS).loc[150] == pytest.approx(_loss(150))
    assert data.series(schema.OPTIM_LR).loc[10] == pytest.approx(3e-4)
    assert data.series(schema.TRAIN_TOKENS).loc[99] == 100 * 4096  # tokens through the step
    assert data.series(schema.PERF_MFU).loc[5] == pytest.approx(0.4)  # logged in percent
    assert data.series(schema.PERF_STEP_TIME_S).loc[5] == pytest.approx(0.125)
    # A leaf tag's loss is a held-out set; the totals and a parent's means are not.
    heldout = {k for k in data.scalars.columns if k.startswith(schema.HELDOUT_PREFIX)}
    assert heldout == {C4, schema.heldout_key("paloma_m2d2_wiki")}
    assert data.series(C4).loc[200] == pytest.approx(_loss(200) + 0.05)
    assert data.series("validation/all/loss").loc[200] == pytest.approx(_loss(200) + 0.1)
    # The lm-eval callback logs with no step: at the step logged last, as W&B places it.
    assert list(data.series(HELLASWAG).index) == [100, 200, 300]
    assert data.series(HELLASWAG + "/stderr").loc[100] == pytest.approx(0.004)
    assert not any(k.startswith(("lm_eval/averages", "extra/global_step", "extra/run_progress")) for k in data.scalars.columns)
    assert run.config["trainer"] == {"train_batch_size": 8}
    notes = " ".join(run.notes)
    assert "histogram" in notes and "'hellaswag'" in notes


def test_a_job_resumed_in_the_same_log_is_a_restart_and_a_partial_line_is_said(tmp_path):
    log = LevanterLog()
    _training(log, range(0, 151))
    log.line("Resuming training from step 100")
    _training(log, range(100, 201))
    text = log.stream.getvalue()
    path = tmp_path / "train.log"
    path.write_text(text[:-1])  # the last line still being written
    run = load(path)
    data = run.to_run_data("resumed")
    assert data.repeats["attempt"].max() == 2
    assert data.series(schema.TRAIN_LOSS).index[-1] == 200
    assert "still being written" in " ".join(run.notes)


def test_the_tracker_lines_alone_saved_as_json_lines_read_alike(tmp_path):
    log = LevanterLog()
    _training(log, range(0, 101))
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(line.split(" - INFO - ", 1)[1] + "\n" for line in log.stream.getvalue().splitlines()))
    assert detect_format(path) == "levanter-log"
    data = load(path).to_run_data("jsonl")
    assert data.series(C4).index.tolist() == [100]


def test_other_json_lines_logs_are_not_taken_for_levanters(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "train/loss": 3.0, "event": "log"}) + "\n" for s in range(5)))
    assert detect_format(path) == "jsonl"


def test_the_tensorboard_folder_of_a_levanter_run_reads_with_the_same_profile(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in range(0, 301):
        for name, value in {"train/loss": _loss(step), "global_step": step, "run_progress": step / 300,
                            "throughput/duration": 0.125, "throughput/mfu": 40.0,
                            "throughput/total_tokens": (step + 1) * 4096.0}.items():
            writer.add_scalar(name, value, step)
        if step % 100 == 0 and step:
            writer.add_scalar("eval/paloma/c4_en/loss", _loss(step) + 0.05, step)
            writer.add_scalar("eval/loss", _loss(step) + 0.1, step)
    writer.close()
    run = load(tmp_path / "tb")
    assert run.profile == "levanter"
    data = run.to_run_data("tb")
    assert data.series(C4).loc[300] == pytest.approx(_loss(300) + 0.05, rel=1e-6)
    assert data.series(schema.PERF_MFU).loc[10] == pytest.approx(0.4)
    assert not math.isnan(data.series(schema.TRAIN_LOSS).loc[300])
