"""The stdout logs of Megatron-LM, GPT-NeoX and nanotron, written line for line as those trainers
print them: the format is detected, every series lands on the trainer's iteration under the
right meaning, a resumed job's second attempt wins, and what cannot be read is said."""

from __future__ import annotations

import math

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load
from monitor.importers.follow import FollowConfig, follow
from monitor.importers.line_tail import LineTail
from monitor.store import open_store


def _loss(step: int) -> float:
    return 2.5 + 8.0 / math.sqrt(step + 1)


ARGUMENTS = """\
using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1
------------------------ arguments ------------------------
  global_batch_size ............................... 256
  lr .............................................. 0.0003
  rampup_batch_size ............................... None
  seq_length ...................................... 2048
  use_flash_attn .................................. True
-------------------- end of arguments ---------------------
> building GPT2BPETokenizer tokenizer ...
"""


def _megatron_iteration(step: int, loss: float, prefix: str = "0: ") -> str:
    return (f"{prefix} [2024-05-01 10:00:00] iteration {step:8d}/    1000 | consumed samples: {step * 256:12d} | "
            f"elapsed time per iteration (ms): 512.3 | throughput per GPU (TFLOP/s/GPU): 150.2 | learning rate: "
            f"3.000000E-04 | global batch size:   256 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | "
            f"number of skipped iterations:   0 | number of nan iterations:   0 |\n")


def _megatron_validation(step: int, loss: float, where: str = "") -> str:
    return ("-" * 80 + "\n" + f"0:  validation loss at iteration {step}{where} | lm loss value: {loss:.6E} | "
            f"lm loss PPL: {math.exp(loss):.6E} | \n" + "-" * 80 + "\n")


def _megatron_log(tmp_path, steps=range(10, 201, 10), tail: str = ""):
    text = ARGUMENTS
    for s in steps:
        text += _megatron_iteration(s, _loss(s))
        if s % 50 == 0:
            text += _megatron_validation(s, _loss(s) + 0.05)
            text += _megatron_validation(s, _loss(s) + 0.2, " [code]")
    text += "0: [after training is done] datetime: 2024-05-01 11:00:00\n"
    text += ("0:  validation loss at the end of training for val data | lm loss value: 9.0E+00 | \n"
             f"0:  validation loss at the end of training for test data | lm loss value: {_loss(200) + 0.07:.6E} | \n")
    path = tmp_path / "train.log"
    path.write_text(text + tail)
    return path


def test_a_megatron_log_reads_every_series_on_the_iteration(tmp_path):
    path = _megatron_log(tmp_path)
    assert detect_format(path) == "megatron-log"
    run = load(path)
    assert run.profile == "megatron"
    data = run.to_run_data("m")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index[:3]) == [10, 20, 30] and loss.index[-1] == 200
    assert loss[100] == pytest.approx(_loss(100), rel=1e-6)
    assert data.series(schema.OPTIM_LR).iloc[-1] == pytest.approx(3e-4)
    assert data.series(schema.TRAIN_GRAD_NORM).iloc[0] == pytest.approx(1.234)
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(0.5123)  # ms read as seconds
    held = data.series(schema.heldout_key("validation"))
    assert list(held.index) == [50, 100, 150, 200]
    # The end-of-training validation repeats step 200: the periodic value is kept.
    assert held[200] == pytest.approx(_loss(200) + 0.05, rel=1e-6)
    assert list(data.series(schema.heldout_key("code")).index) == [50, 100, 150, 200]
    test = data.series(schema.heldout_key("test"))
    assert list(test.index) == [200] and test[200] == pytest.approx(_loss(200) + 0.07, rel=1e-6)
    assert not any("ppl" in k for k in data.scalars.columns)  # perplexity = exp(loss): dropped
    assert run.config["global_batch_size"] == 256 and run.config["use_flash_attn"] is True
    assert run.config["rampup_batch_size"] is None
    assert run.tokens_per_step == 256 * 2048
    assert run.attempts == 1 and not run.events


def test_a_resumed_job_appending_to_its_log_is_a_second_attempt(tmp_path):
    # The job died after iteration 100 and resumed from its checkpoint at 60, appending.
    path = _megatron_log(tmp_path, steps=[*range(10, 101, 10), *range(70, 151, 10)])
    run = load(path)
    assert run.attempts == 2
    (restart,) = run.events
    assert restart["step"] == 70 and "went back from step 100 to 70" in restart["payload"]["reason"]
    loss = run.to_run_data("m").series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(10, 151, 10))


def test_a_line_still_being_written_and_an_unreadable_value_are_said(tmp_path):
    path = _megatron_log(tmp_path, steps=range(10, 51, 10), tail="0:  [2024-05-01] iteration       60/    1000 | lm lo")
    text = path.read_text().replace("throughput per GPU (TFLOP/s/GPU): 150.2", "approx flops per GPU: 100.0TFLOPS")
    path.write_text(text)
    run = load(path)
    notes = " ".join(run.notes)
    assert "has no newline yet" in notes
    assert "'approx flops per GPU': value '100.0TFLOPS'" in notes and "not a number" in notes
    assert run.to_run_data("m").series(schema.TRAIN_LOSS).index[-1] == 50


def test_gpt_neox_writes_samples_per_second_before_the_iteration(tmp_path):
    lines = []
    for s in range(10, 101, 10):
        lines.append(f" samples/sec: 98.123 | iteration {s:8d}/  320000 | elapsed time per iteration (ms): 1234.5 | "
                     f"learning rate: 1.000E-05 | approx flops per GPU: 100.0TFLOPS | lm_loss: {_loss(s):.6E} | "
                     f"loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")
        if s % 50 == 0:
            lines.append(f" validation results at iteration {s} | lm_loss value: {_loss(s) + 0.05:.6E} | "
                         f"lm_loss_ppl value: {math.exp(_loss(s) + 0.05):.6E} | ")
    lines.append(f" test results at the end of training | lm_loss value: {_loss(100) + 0.08:.6E} | ")
    path = tmp_path / "neox.out"
    path.write_text("\n".join(lines) + "\n")
    data = load(path).to_run_data("neox")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(10, 101, 10))
    assert data.series("samples/sec").iloc[0] == pytest.approx(98.123)
    assert list(data.series(schema.heldout_key("validation")).index) == [50, 100]
    assert data.series(schema.heldout_key("test"))[100] == pytest.approx(_loss(100) + 0.08, rel=1e-6)
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(1.2345)


def test_gpt_neox_s_tensorboard_names_mean_what_its_stdout_log_says(tmp_path):
    # NeoX writes each value through tb_wandb_log: `train/lm_loss`, `validation/lm_loss`,
    # `runtime/iteration_time`, ... The held-out sets are the ones its stdout log names.
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tensorboard"))
    for s in range(10, 101, 10):
        for name, value in {"train/lm_loss": _loss(s), "train/learning_rate": 1e-5, "train/loss_scale": 4096.0,
                            "runtime/iteration_time": 1.2345, "runtime/samples_per_sec": 98.1,
                            "runtime/flops_per_sec_per_gpu": 1.0e14}.items():
            writer.add_scalar(name, value, s)
        if s % 50 == 0:
            writer.add_scalar("validation/lm_loss", _loss(s) + 0.05, s)
            writer.add_scalar("validation/lm_loss_ppl", math.exp(_loss(s) + 0.05), s)
    writer.add_scalar("test/lm_loss", _loss(100) + 0.08, 100)
    writer.close()
    run = load(tmp_path / "tensorboard")
    assert run.profile == "megatron"
    data = run.to_run_data("neox-tb")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(10, 101, 10))
    assert list(data.series(schema.heldout_key("validation")).index) == [50, 100]
    assert data.series(schema.heldout_key("test"))[100] == pytest.approx(_loss(100) + 0.08, rel=1e-6)
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(1.2345)
    assert data.series("perf/device_tflops_per_s").iloc[0] == pytest.approx(100.0)
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(1e-5)
    assert not any("ppl" in key for key in data.scalars.columns)


def test_nanotron_numbers_with_their_thousands_suffix(tmp_path):
    lines = [f"12/04/2024 10:00:00 [INFO|DP=0|PP=0|TP=0|ip-10-0-0-1]: iteration: {s} / 2000 | consumed_tokens: {s}M | "
             f"elapsed_time_per_iteration_ms: 512 | tokens_per_sec: 1.02M | tokens_per_sec_per_gpu: 128K | "
             f"global_batch_size: 256 | lm_loss: {_loss(s):.4f} | lr: 0.0003 | model_tflops_per_gpu: 150 | "
             f"grad_norm: 0.51" for s in range(1, 41)]
    path = tmp_path / "nanotron.log"
    path.write_text("\n".join(lines) + "\n")
    data = load(path).to_run_data("nt")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(1, 41))
    assert data.series(schema.PERF_TOKENS_PER_S).iloc[0] == pytest.approx(1.02e6)
    assert data.series(schema.PERF_DEVICE_TOKENS_PER_S).iloc[0] == pytest.approx(128e3)
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(0.512)
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(3e-4)
    assert data.series(schema.TRAIN_TOKENS)[7] == pytest.approx(7e6)  # through the step: a token axis
    assert data.series("perf/device_tflops_per_s").iloc[0] == pytest.approx(150.0)


def test_nanotron_s_tensorboard_names_read_as_its_stdout_log_does(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb_logs"))
    for s in range(1, 41):
        for name, value in {"consumed_tokens": s * 1048576, "elapsed_time_per_iteration_ms": 512.0,
                            "tokens_per_sec": 1.02e6, "tokens_per_sec_per_gpu": 128e3, "global_batch_size": 256,
                            "lm_loss": _loss(s), "lr": 3e-4, "model_tflops_per_gpu": 150.0, "grad_norm": 0.51}.items():
            writer.add_scalar(name, value, s)
    writer.close()
    run = load(tmp_path / "tb_logs")
    assert run.profile == "megatron"
    data = run.to_run_data("nt-tb")
    assert data.series(schema.TRAIN_LOSS)[40] == pytest.approx(_loss(40), rel=1e-6)
    assert data.series(schema.TRAIN_TOKENS)[10] == 10 * 1048576
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(0.512)
    assert data.series(schema.PERF_DEVICE_TOKENS_PER_S).iloc[0] == pytest.approx(128e3)


def test_a_log_of_no_iteration_values_is_one_clear_error(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(ARGUMENTS + "> compiling dataset index builder ...\n")
    with pytest.raises(GapwatchError, match="no Megatron-LM, GPT-NeoX or nanotron iteration lines"):
        load(path)


def test_a_plain_text_file_is_not_taken_for_a_megatron_log(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("we ran iteration 10/20 of the sweep | results below\nnothing else\n")
    with pytest.raises(GapwatchError, match="unrecognised format"):
        detect_format(path)


def test_following_a_growing_log_reads_on_from_its_last_whole_line(tmp_path, sqlite_url, monkeypatch):
    # A training job appending to its log while `import --follow` polls it: each poll reads from
    # where the last stopped (a line cut short waits for its newline), and the store ends up
    # holding what a whole import of the finished log holds.
    path = tmp_path / "train.log"
    text = ARGUMENTS + "".join(_megatron_iteration(s, _loss(s)) for s in range(10, 301, 10))
    cuts = [text.index(" iteration      110/"), text.index(" iteration      200/") + 25, len(text)]
    path.write_text(text[:cuts[0]])
    starts = []
    read = LineTail.read

    def spy(self):
        starts.append(self.offset)
        return read(self)

    monkeypatch.setattr(LineTail, "read", spy)

    def grow(poll):
        if poll.poll < len(cuts):
            path.write_text(text[:cuts[poll.poll]])

    with open_store(sqlite_url) as store:
        last = follow(store, "live", str(path), "megatron-log", config=FollowConfig(poll_interval_s=0, max_polls=3),
                      on_poll=grow)
        followed = store.load_run("live").scalars
    assert starts[0] == 0 and starts[1] > 0 and starts[2] > starts[1]  # read on, never from the start again
    whole = load(path)
    assert last.rows_total == len(whole.scalars)
    expected = whole.to_run_data("whole").scalars
    assert set(followed.columns) == set(expected.columns) and followed.equals(expected[followed.columns])


def test_nemo_steps_are_its_global_step(tmp_path):
    # NeMo 2 prints Megatron's line shape with an iteration counted within the epoch: its own
    # global_step is the step, and its names are read by the nemo profile.
    lines = [f"Training epoch {s // 50}, iteration {s % 50}/49 | lr: 2e-05 | global_batch_size: 8 | global_step: {s} | "
             f"reduced_train_loss: {_loss(s):.4f} | train_step_timing in s: 2.5 | consumed_samples: {8 * (s + 1)}"
             for s in range(0, 120)]
    path = tmp_path / "nemo_log_globalrank-0.txt"
    path.write_text("\n".join(lines) + "\n")
    run = load(path)
    assert run.profile == "nemo"
    data = run.to_run_data("nemo")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(0, 120))
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(2.5)
    assert "extra/global_step" not in data.scalars and run.attempts == 1
