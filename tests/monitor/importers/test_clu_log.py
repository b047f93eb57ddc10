"""The console log of a trainer that writes its metrics through CLU's LoggingWriter (Flax's
examples), as absl's real log handler prints it, read with no flags; and the same names in the
TensorBoard folder CLU's SummaryWriter fills beside it."""

from __future__ import annotations

import io
import logging
import math

import pytest
from absl import logging as absl_logging

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load

HELDOUT = schema.heldout_key("eval")


class CluLog:
    """An absl log written the way CLU's LoggingWriter writes scalars: one INFO line a call, the
    step in brackets, ` collection=<name>` for a writer made for one, then `name=value` sorted by
    name (a Python float to 6 significant digits, other values as `str` prints them)."""

    def __init__(self, python_default: bool = False, collection: str | None = None) -> None:
        self.stream = io.StringIO()
        handler = logging.StreamHandler(self.stream)
        # absl's own prefix, or Python logging's default one (absl before `app.run` set it up).
        handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT) if python_default
                             else absl_logging.PythonFormatter())
        self.logger = logging.getLogger(f"absl.test.{id(self)}")
        self.logger.name = "absl"
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        self.logger.handlers = [handler]
        self.collection = f" collection={collection}" if collection else ""

    def scalars(self, step: int, values: dict) -> None:
        shown = [f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(values.items())]
        self.logger.info("[%d]%s %s", step, self.collection, ", ".join(shown))

    def texts(self, step: int, texts: dict) -> None:
        self.logger.info("[%d]%s Got texts: %s.", step, self.collection, texts)

    def hparams(self, hparams: dict) -> None:
        self.logger.info("[Hyperparameters]%s %s", self.collection, hparams)

    def line(self, text: str) -> None:
        self.logger.info("%s", text)

    def save(self, path, cut_last_newline: bool = False):
        text = self.stream.getvalue()
        path.write_text(text[:-1] if cut_last_newline else text)
        return path


def _flax_lm1b(log: CluLog, steps, eval_every: int = 100) -> None:
    """What Flax's lm1b example writes: train_* means and eval_* at each evaluation, CLU's
    ReportProgress every 50 steps, generated samples as text."""
    for step in steps:
        if step % 50 == 0 and step:
            log.scalars(step, {"steps_per_sec": 3.25, "uptime": step / 3.25})
        if step % eval_every == 0:
            loss = 6.0 * (step + 10) ** -0.1
            log.scalars(step, {"train_loss": loss, "train_accuracy": 0.3, "train_learning_rate": 0.0016,
                               "train_perplexity": math.exp(loss)})
            log.scalars(step, {"eval_loss": loss + 0.05, "eval_accuracy": 0.29, "eval_perplexity": math.exp(loss + 0.05)})
            log.texts(step, {"samples": "I love to the moon ."})


@pytest.mark.parametrize("python_default", [False, True], ids=["absl prefix", "python logging prefix"])
def test_a_flax_example_log_reads_with_the_flax_profile(tmp_path, python_default):
    log = CluLog(python_default)
    log.line("Initializing dataset.")
    log.hparams({"learning_rate": 0.0016, "per_device_batch_size": 32, "max_target_length": 128})
    _flax_lm1b(log, range(0, 1001))
    path = log.save(tmp_path / "train.log")
    assert detect_format(path) == "clu-log"
    run = load(path)
    assert run.profile == "flax"
    data = run.to_run_data("lm1b")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(0, 1001, 100))
    # Printed to 6 significant digits.
    assert loss.loc[500] == pytest.approx(6.0 * 510 ** -0.1, rel=1e-5)
    assert data.series(HELDOUT).loc[500] == pytest.approx(6.0 * 510 ** -0.1 + 0.05, rel=1e-5)
    assert data.series(schema.OPTIM_LR).loc[100] == pytest.approx(0.0016)
    assert data.series("perf/steps_per_s").index[0] == 50
    assert not any("perplexity" in key for key in data.scalars.columns)
    assert run.config["per_device_batch_size"] == 32


def test_a_writer_made_for_a_collection_puts_its_names_under_it(tmp_path):
    train, evaluation = CluLog(collection="train"), CluLog(collection="eval")
    for step in range(10, 101, 10):
        train.scalars(step, {"loss": 3.0 - step / 100})
        evaluation.scalars(step, {"loss": 3.1 - step / 100})
    path = tmp_path / "train.log"
    path.write_text(train.stream.getvalue() + evaluation.stream.getvalue())
    run = load(path)
    # `eval/loss` is an evaluation's loss: the held-out loss of a set called eval.
    assert set(run.scalars["key"]) == {schema.TRAIN_LOSS, HELDOUT}
    data = run.to_run_data("collections")
    assert data.series(schema.TRAIN_LOSS).loc[50] == pytest.approx(2.5)
    assert data.series(HELDOUT).loc[50] == pytest.approx(2.6)
    assert not len(data.repeats)


def test_a_job_resumed_in_the_same_log_is_a_restart(tmp_path):
    log = CluLog()
    _flax_lm1b(log, range(0, 601))
    log.line("Restoring checkpoint from step 400.")
    _flax_lm1b(log, range(400, 801))
    run = load(log.save(tmp_path / "train.log"))
    data = run.to_run_data("resumed")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(0, 801, 100))
    assert len(data.repeats) and data.repeats["attempt"].max() == 2


def test_a_value_that_is_no_number_and_a_line_still_being_written_are_left_out_and_said(tmp_path):
    log = CluLog()
    log.hparams({"model": object()})  # a config holding objects prints no literal
    log.scalars(100, {"train_loss": 2.5, "train_learning_rate": "warmup"})
    log.scalars(200, {"train_loss": 2.4})
    log.scalars(300, {"train_loss": 2.3})
    run = load(log.save(tmp_path / "train.log", cut_last_newline=True))
    data = run.to_run_data("notes")
    assert list(data.series(schema.TRAIN_LOSS).index) == [100, 200]
    notes = " ".join(run.notes)
    assert "'warmup'" in notes and "still being written" in notes and "no Python literal" in notes


def test_logs_of_other_trainers_are_not_taken_for_clu_logs(tmp_path):
    other = CluLog()
    other.line("completed step: 10, seconds: 1.234, TFLOP/s/device: 123.456, loss: 7.123")
    other.line("Finished training step 4.")
    path = other.save(tmp_path / "maxtext.log")
    assert detect_format(path) == "maxtext-log"
    plain = tmp_path / "plain.log"
    plain.write_text("[100] loss=2.5, lr=0.001\n")  # no log prefix: nothing says a writer wrote it
    with pytest.raises(GapwatchError):
        detect_format(plain)


def test_the_tensorboard_folder_beside_it_reads_with_the_same_profile(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "workdir"))
    for step in range(0, 1001, 100):
        loss = 6.0 * (step + 10) ** -0.1
        for name, value in {"train_loss": loss, "train_learning_rate": 0.0016, "train_perplexity": math.exp(loss),
                            "eval_loss": loss + 0.05, "eval_perplexity": math.exp(loss + 0.05)}.items():
            writer.add_scalar(name, value, step)
    writer.close()
    run = load(tmp_path / "workdir")
    assert run.profile == "flax"
    data = run.to_run_data("lm1b-tb")
    assert data.series(HELDOUT).loc[1000] == pytest.approx(6.0 * 1010 ** -0.1 + 0.05, rel=1e-5)
    assert not any("perplexity" in key for key in data.scalars.columns)
