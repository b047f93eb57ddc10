"""T5X's model folder: train/, training_eval/<task>/ and inference_eval/<task>/ event files, with
the gin config that says which of its losses is a token's mean (monitor/importers/t5x_gin.py).

The gin config is made by gin itself (config_str, and its Markdown as T5X's text summary holds
it); the event files by torch's SummaryWriter, with T5X's names and the values T5X logs in each
case: its `loss` is a batch's sum unless the config sets a loss normalizing factor."""

from __future__ import annotations

import logging
import math

import gin
import pytest
from torch.utils.tensorboard import SummaryWriter

from monitor import schema
from monitor.importers import load
from monitor.importers.t5x_gin import NORMALIZED, SUMMED, gin_settings, profile_for

from .test_clu_log import CluLog

TOKENS = 114 * 128  # the target tokens of one batch
STEPS = range(100, 3001, 100)
EVALS = range(1000, 3001, 1000)


@gin.configurable("EncoderDecoderModel", module="models")
def _model(loss_normalizing_factor=None, z_loss=0.0):
    del loss_normalizing_factor, z_loss


@gin.configurable("train", module="train_script")
def _train(model=None, eval_period=1000):
    del model, eval_period


def _gin_config(factor: str) -> str:
    """The gin config a T5X run with this loss_normalizing_factor writes (gin.config_str())."""
    gin.clear_config()
    gin.parse_config(f"""
        LOSS_NORMALIZING_FACTOR = {factor}
        MODEL = @models.EncoderDecoderModel()
        models.EncoderDecoderModel.loss_normalizing_factor = %LOSS_NORMALIZING_FACTOR
        models.EncoderDecoderModel.z_loss = 0.0001
        train_script.train.model = %MODEL
        train_script.train.eval_period = 1000
    """)
    text = gin.config_str()
    gin.clear_config()
    return text


def token_mean(step: int) -> float:
    return 2.5 + 3 / math.sqrt(step)


def _model_folder(root, normalized: bool, gin_text: str | None = None):
    """A T5X model folder: what its train and training_eval writers log, and the gin config as
    the train writer's `config` text summary when given."""
    scale = 1.0 if normalized else TOKENS  # `loss` is a token's mean, or the batch's sum
    train = SummaryWriter(str(root / "train"))
    evaluation = SummaryWriter(str(root / "training_eval" / "c4_eval"))
    if gin_text is not None:
        train.add_text("config", gin.markdown(gin_text), 0)
    for step in STEPS:
        m = token_mean(step)
        for tag, value in {
            "loss": m * scale, "cross_ent_loss": (m - 1e-4) * scale, "z_loss": 1e-4 * scale,
            "loss_per_nonpadding_target_token": m * scale / TOKENS,
            "loss_per_all_target_tokens": m * scale / TOKENS, "accuracy": 0.4,
            "learning_rate": 0.01 / math.sqrt(step), "timing/steps_per_second": 2.0,
            "timing/target_tokens_per_second": 2.0 * TOKENS, "timing/seconds": 50.0,
        }.items():
            train.add_scalar(tag, value, step)
        if step in EVALS:
            for tag, value in {"loss": (m + 0.05) * scale, "loss_per_nonpadding_target_token": (m + 0.05) * scale / TOKENS,
                               "accuracy": 0.39}.items():
                evaluation.add_scalar(tag, value, step)
    train.close()
    evaluation.close()


def _read_as(folder, profile: str):
    """The model folder imported: read with `profile`, a token's mean as its training loss and
    as its task's held-out loss."""
    run = load(folder)
    assert run.profile == profile
    data = run.to_run_data("t5x")
    assert data.series(schema.TRAIN_LOSS).to_dict() == {s: pytest.approx(token_mean(s)) for s in STEPS}
    assert data.series("eval/heldout/c4_eval/loss").to_dict() == {
        s: pytest.approx(token_mean(s) + 0.05) for s in EVALS}
    return run, data


def test_a_default_run_has_its_token_mean_as_the_training_and_held_out_loss(tmp_path):
    # T5X's own configs leave the factor at None: `loss` is the batch's summed loss, hundreds of
    # thousands of nats. Read as the training loss, it made any comparison meaningless.
    _model_folder(tmp_path, normalized=False, gin_text=_gin_config("None"))
    run, data = _read_as(tmp_path, SUMMED)
    assert [k for k in data.scalars.columns if k.startswith(schema.HELDOUT_PREFIX)] == ["eval/heldout/c4_eval/loss"]
    assert data.series("train/summed_loss").iloc[-1] == pytest.approx(token_mean(3000) * TOKENS)
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(0.001)
    assert "perf/steps_per_s" in data.scalars and "perf/tokens_per_s" in data.scalars
    assert run.config["EncoderDecoderModel.loss_normalizing_factor"] == "%LOSS_NORMALIZING_FACTOR"
    assert not any("gin config" in n or "not scalars" in n for n in run.notes)


def test_a_run_that_set_a_normalizing_factor_has_its_loss_as_the_training_loss(tmp_path):
    # Fine-tuning the public checkpoints sets the factor to the pretraining batch's tokens: `loss`
    # is then a token's mean, and loss_per_nonpadding_target_token that divided again. T5X saves
    # the config as config.gin in the model folder too.
    _model_folder(tmp_path, normalized=True)
    (tmp_path / "config.gin").write_text(_gin_config("233472"))
    _, data = _read_as(tmp_path, NORMALIZED)
    assert not any(k.endswith("target_token") or k.endswith("target_tokens") for k in data.scalars.columns
                   if k.startswith("train/"))


def test_without_its_gin_config_a_run_is_read_as_the_default_and_the_import_says_so(tmp_path):
    _model_folder(tmp_path, normalized=False)
    run = load(tmp_path)
    assert run.profile == SUMMED
    assert run.to_run_data("t5x").series(schema.TRAIN_LOSS).iloc[-1] == pytest.approx(token_mean(3000))
    assert any("no T5X gin config" in n and NORMALIZED in n for n in run.notes)


def test_seqio_inference_evaluations_are_downstream_evals(tmp_path):
    _model_folder(tmp_path, normalized=False, gin_text=_gin_config("None"))
    inference = SummaryWriter(str(tmp_path / "inference_eval" / "glue_cola_v2"))
    for step in EVALS:
        inference.add_scalar("eval/matthews_corrcoef", 0.3 + step / 1e5, step)
    inference.close()
    data = load(tmp_path).to_run_data("t5x")
    assert data.series("eval/downstream/glue_cola_v2/matthews_corrcoef").to_dict() == {
        s: pytest.approx(0.3 + s / 1e5) for s in EVALS}


def _console_log(path, normalized: bool, gin_text: str | None):
    """T5X's console log: gin_utils.py logs the config a line at a time, then CLU's LoggingWriter
    the train and training_eval collections' scalars, through absl's formatter."""
    train, evaluation = CluLog(collection="train"), CluLog(collection="training_eval/c4_eval")
    evaluation.stream = train.stream
    evaluation.logger.handlers = train.logger.handlers
    handler = train.logger.handlers[0]
    for line in (["Gin Configuration:", *gin_text.splitlines()] if gin_text is not None else []):
        handler.handle(logging.LogRecord("absl", logging.INFO, "/t5x/gin_utils.py", 85, "%s", (line,), None))
    scale = 1.0 if normalized else TOKENS
    for step in STEPS:
        m = token_mean(step)
        train.scalars(step, {"loss": m * scale, "loss_per_nonpadding_target_token": m * scale / TOKENS,
                             "learning_rate": 0.01 / math.sqrt(step)})
        if step in EVALS:
            evaluation.scalars(step, {"loss": (m + 0.05) * scale,
                                      "loss_per_nonpadding_target_token": (m + 0.05) * scale / TOKENS})
    return train.save(path)


@pytest.mark.parametrize("normalized", [False, True])
def test_the_console_log_is_read_with_the_gin_config_it_logged(tmp_path, normalized):
    path = _console_log(tmp_path / "train.log", normalized, _gin_config("233472" if normalized else "None"))
    run = load(path)
    assert run.profile == (NORMALIZED if normalized else SUMMED)
    data = run.to_run_data("t5x")
    assert data.series(schema.TRAIN_LOSS).iloc[-1] == pytest.approx(token_mean(3000), rel=1e-5)
    assert data.series("eval/heldout/c4_eval/loss").iloc[-1] == pytest.approx(token_mean(3000) + 0.05, rel=1e-5)
    assert not any("gin config" in n for n in run.notes)


def test_a_console_log_without_the_gin_config_is_read_as_the_default_and_says_so(tmp_path):
    run = load(_console_log(tmp_path / "train.log", False, None))
    assert run.profile == SUMMED
    assert any("no T5X gin config" in n for n in run.notes)


def test_gin_settings_read_plain_and_markdown_configs_alike():
    text = _gin_config("'NUM_REAL_TARGET_TOKENS'")
    assert gin_settings(text) == gin_settings(gin.markdown(text))
    assert gin_settings(text)["LOSS_NORMALIZING_FACTOR"] == "NUM_REAL_TARGET_TOKENS"
    assert profile_for(gin_settings(text)) == NORMALIZED
    assert profile_for(gin_settings(_gin_config("None"))) == SUMMED
    # A config that binds no factor leaves T5X's default (None); a value written over several
    # lines is left out; a text that is no gin config says nothing.
    assert profile_for(gin_settings("train_script.train.eval_period = 1000\nx.y = [\n  1,\n]\n")) == SUMMED
    assert "x.y" not in gin_settings("x.y = [\n  1,\n]\n")
    assert profile_for(gin_settings('{"lr": 0.1, "loss_normalizing_factor": 4}')) is None
    assert profile_for({"Model.loss_normalizing_factor": "%UNBOUND"}) is None
