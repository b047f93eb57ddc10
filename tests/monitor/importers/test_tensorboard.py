"""TensorBoard event files written by real writers: PyTorch's SummaryWriter (simple_value
scalars) and TensorBoard's own event writer with TF2-style tensor scalars, as MaxText writes."""

from __future__ import annotations

import math
import time
import re

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util
from torch.utils.tensorboard import SummaryWriter

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load
from monitor.importers.tensorboard_events import event_files


def _maxtext_style(logdir, steps, start=0):
    """Scalars as tensors with the scalars plugin's metadata (TF2 / Flax summary writers)."""
    writer = EventFileWriter(str(logdir))
    for step in range(start, start + steps):
        values = []
        for tag, value in (("learning/loss", 4.0 - step * 0.01),
                           ("perf/step_time_seconds", 0.25),
                           ("learning/current_learning_rate", 3e-4)):
            meta = summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
            values.append(summary_pb2.Summary.Value(
                tag=tag, metadata=meta,
                tensor=tensor_util.make_tensor_proto(np.float32(value))))
        writer.add_event(event_pb2.Event(step=step, wall_time=1.7e9 + step,
                                         summary=summary_pb2.Summary(value=values)))
    writer.close()


def test_maxtext_tensor_scalars_map_with_the_maxtext_profile(tmp_path):
    _maxtext_style(tmp_path, 50)
    assert detect_format(tmp_path) == "tensorboard"
    run = load(tmp_path)
    assert run.profile == "maxtext"
    data = run.to_run_data("mt")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(50))
    assert data.series(schema.TRAIN_LOSS).loc[10] == pytest.approx(3.9)
    assert data.series(schema.PERF_STEP_TIME_S).loc[3] == pytest.approx(0.25)
    assert data.series(schema.OPTIM_LR).loc[3] == pytest.approx(3e-4)


def test_pytorch_writer_with_histograms_and_two_subfolders(tmp_path):
    for sub, offset in (("train", 0.0), ("eval", 1.0)):
        writer = SummaryWriter(str(tmp_path / sub))
        for step in range(0, 30, 3):
            writer.add_scalar("loss", 3.0 + offset - step * 0.01, step)
        writer.add_histogram("weights", np.arange(10.0), 3)
        writer.close()
    run = load(tmp_path, profile="gapwatch")
    data = run.to_run_data("pt")
    # Two TensorBoard runs in subfolders: tags are prefixed as TensorBoard shows them.
    assert set(data.scalars.columns) == {"train/loss", "eval/loss"}
    assert data.series("eval/loss").loc[3] == pytest.approx(3.97)
    assert any("weights" in n for n in run.notes)


def _launch(folder, offset: float = 0.0, start: int = 1) -> None:
    """One training launch through torch's SummaryWriter from step `start`: a loss each step, a
    held-out loss through add_scalars, which writes it to a subfolder of its own (loss_val/)."""
    writer = SummaryWriter(str(folder))
    for step in range(start, 101):
        writer.add_scalar("lr", 1e-3, step)
        writer.add_scalars("loss", {"train": 3.0 + offset - step * 0.01}, step)
        if step % 25 == 0:
            writer.add_scalars("loss", {"val": 3.1 + offset - step * 0.01}, step)
    writer.close()


def test_a_folder_of_two_launches_is_refused_with_their_names(tmp_path):
    # runs/ as torch's SummaryWriter fills it: one folder a launch.
    _launch(tmp_path / "runs" / "Dec04_10-00-00_host", 0.0)
    _launch(tmp_path / "runs" / "Dec05_09-00-00_host", 0.5)
    with pytest.raises(GapwatchError, match=r"a TensorBoard folder of 2 training runs \(Dec04_10-00-00_host, "
                                            r"Dec05_09-00-00_host\): import one run from its own folder"):
        load(tmp_path / "runs")
    # One launch read from its own folder or from a parent holding only it: the same run.
    alone = tmp_path / "alone"
    _launch(alone / "Dec04_10-00-00_host")
    for source in (tmp_path / "runs" / "Dec04_10-00-00_host", alone):
        run = load(source)
        assert run.name_hint == "Dec04_10-00-00_host"
        data = run.to_run_data("one")
        assert data.series(schema.TRAIN_LOSS).loc[100] == pytest.approx(2.0)
        assert list(data.series(schema.heldout_key("val")).index) == [25, 50, 75, 100]


def test_launches_that_resume_one_another_are_one_run(tmp_path):
    # The Hugging Face Trainer's runs/ after a job was killed at step 80 and resumed from its
    # step-60 checkpoint: a second launch folder that begins above where the first began.
    _launch(tmp_path / "runs" / "Dec04_10-00-00_host", 0.0)
    _launch(tmp_path / "runs" / "Dec04_11-00-00_host", 0.5, start=61)
    run = load(tmp_path / "runs")
    assert run.attempts == 2 and run.events[0]["step"] == 61
    assert any("2 launches of one run" in n for n in run.notes)
    data = run.to_run_data("resumed")
    loss = data.series(schema.TRAIN_LOSS)
    assert len(loss) == 100 and loss.loc[60] == pytest.approx(2.4) and loss.loc[61] == pytest.approx(2.89)
    assert list(data.series(schema.heldout_key("val")).index) == [25, 50, 75, 100]


def test_resumed_writer_is_a_restart(tmp_path):
    _maxtext_style(tmp_path, 20)
    _maxtext_style(tmp_path, 15, start=10)  # a new process resumed from step 10
    run = load(tmp_path)
    assert run.attempts == 2 and run.events[0]["step"] == 10
    data = run.to_run_data("r")
    assert len(data.series(schema.TRAIN_LOSS)) == 25
    assert set(data.repeats["attempt"]) == {1, 2}


def test_a_process_s_tenth_writer_of_one_second_is_read_after_its_ninth(tmp_path):
    # torch names a writer's file by the second it opened, the host, the process and a count of
    # the writers that process opened: the 10th file of one second is written after the 9th.
    for count, steps in ((9, range(1, 151)), (10, range(101, 201))):
        made = tmp_path / f"made{count}"
        writer = SummaryWriter(str(made))
        for step in steps:
            writer.add_scalar("loss", 4 - step * 0.005, step)
        writer.close()
        [written] = made.iterdir()
        written.rename(tmp_path / f"events.out.tfevents.1700000000.host.4242.{count}")
        made.rmdir()
    run = load(tmp_path)
    assert [(e["step"], e["kind"]) for e in run.events] == [(101, "restart")]
    assert list(run.to_run_data("r").series(schema.TRAIN_LOSS).dropna().index) == list(range(1, 201))


def test_truncated_and_damaged_event_files(tmp_path):
    _maxtext_style(tmp_path, 40)
    (path,) = event_files(tmp_path)
    raw = path.read_bytes()
    whole = load(tmp_path).to_run_data("w").series(schema.TRAIN_LOSS)
    # Cut anywhere in the last record: its length, the length's checksum, the data or the data's
    # checksum. Each is a file that stops inside a record, never a damaged one.
    for drop in range(1, 40):
        path.write_bytes(raw[:-drop])
        cut = load(tmp_path)
        assert cut.crashed
        assert any(re.search(r"crashed: the file stops inside record \d+; imported its [\d,]+ "
                             r"complete records, \d+ bytes left unread", n) for n in cut.notes)
        # Every complete record is there: the whole run less its last step's loss at most.
        got = cut.to_run_data("c").series(schema.TRAIN_LOSS)
        assert len(whole) - 1 <= len(got) <= len(whole)
        assert got.to_dict() == whole.loc[got.index].to_dict()
    damaged = bytearray(raw)
    damaged[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(GapwatchError, match=r"record \d+: checksum mismatch"):
        load(tmp_path)


def test_bfloat16_and_other_tensor_scalars(tmp_path):
    # A JAX loss written as computed is a bfloat16 tensor, which numpy has no type for. TF keeps a
    # scalar's 16 bits in half_val, a writer of raw bytes in tensor_content; 2.75 is 0x4030 either way.
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    as_half_val = tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, half_val=[0x4030])
    as_bytes = tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, tensor_content=(0x4030).to_bytes(2, "little"))
    writer = EventFileWriter(str(tmp_path))
    for step, tensor in ((1, as_half_val), (2, as_bytes), (3, tensor_util.make_tensor_proto(np.float16(2.5))),
                         (4, tensor_util.make_tensor_proto(np.float64(2.25)))):
        value = summary_pb2.Summary.Value(tag="loss", metadata=meta, tensor=tensor)
        # A type no number can be read from costs only its own series.
        odd = summary_pb2.Summary.Value(tag="odd", metadata=meta, tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_VARIANT))
        writer.add_event(event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=[value, odd])))
    writer.close()
    run = load(tmp_path)
    assert run.to_run_data("bf16").series(schema.TRAIN_LOSS).to_dict() == {1: 2.75, 2: 2.75, 3: 2.5, 4: 2.25}
    assert any(n.endswith("left out summaries that are not scalars: odd (4)") for n in run.notes)


def _trainer_run(folder, steps, logged):
    """A trainer's TensorBoard file, written through torch's SummaryWriter (as the trainers named in
    the tests below write theirs), read back: `logged(step)` is the (tag, value) pairs of a step."""
    writer = SummaryWriter(str(folder))
    for step in steps:
        for tag, value in logged(step):
            writer.add_scalar(tag, value, step)
    writer.close()
    return load(folder)


def test_torchtitan_metrics(tmp_path):
    # torchtitan's TensorBoard logger writes its metrics under these names every log_freq steps;
    # validation every 50.
    def logged(step):
        yield from (("loss_metrics/global_avg_loss", 8.0 - step / 100), ("loss_metrics/global_max_loss", 9.0),
                    ("grad_norm", 1.5), ("lr", 3e-4), ("throughput(tps)", 5000.0), ("tflops", 120.0),
                    ("mfu(%)", 38.5), ("time_metrics/end_to_end(s)", 0.8),
                    ("time_metrics/data_loading(s)", 0.01), ("time_metrics/data_loading(%)", 1.25),
                    ("memory/max_reserved(GiB)", 60.0), ("memory/max_reserved(%)", 75.0))
        if step % 50 == 0:
            yield "validation_metrics/loss", 8.2 - step / 100

    run = _trainer_run(tmp_path, range(10, 201, 10), logged)
    assert run.profile == "torchtitan"
    data = run.to_run_data("titan")
    assert data.series(schema.TRAIN_LOSS).loc[200] == pytest.approx(6.0)
    assert data.series(schema.heldout_key("validation")).to_dict() == pytest.approx(
        {50: 7.7, 100: 7.2, 150: 6.7, 200: 6.2})
    assert data.series(schema.PERF_MFU).iloc[0] == pytest.approx(0.385)
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(0.8)
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(3e-4)
    assert data.series(schema.TRAIN_GRAD_NORM).iloc[0] == pytest.approx(1.5)
    assert data.series("perf/device_tokens_per_s").iloc[0] == 5000.0
    assert run.key_map["time_metrics/data_loading(%)"] == "time_metrics/data_loading_pct"
    assert run.key_map["memory/max_reserved(%)"] == "memory/max_reserved_pct"
    assert run.key_map["time_metrics/data_loading(s)"] == "time_metrics/data_loading_s"


MEGATRON_DEEPSPEED_SECTIONS = {"lm loss": "lm-loss-training/", "lm loss validation": "lm-loss-validation/",
                               "lm loss validation ppl": "lm-loss-validation/"}


@pytest.mark.parametrize("sectioned", [False, True], ids=["megatron-lm", "megatron-deepspeed"])
def test_megatron_metrics(tmp_path, sectioned):
    # Megatron-LM's training loop writes these through torch's SummaryWriter every log interval,
    # each also "vs samples" with the consumed samples as its step; validation every 50.
    # Megatron-DeepSpeed (BLOOM's logs) puts each tag under a section: grad-norm/grad-norm, and
    # writes the step against samples and tokens as series of their own.
    def tag_of(tag: str) -> str:
        return (MEGATRON_DEEPSPEED_SECTIONS.get(tag, f"{tag}/") + tag) if sectioned else tag

    writer = SummaryWriter(str(tmp_path))
    batch = 256
    for step in range(10, 201, 10):
        for tag, value in (("lm loss", 8.0 - step / 100), ("learning-rate", 3e-4), ("grad-norm", 1.5),
                           ("iteration-time", 0.8), ("batch-size", batch)):
            writer.add_scalar(tag_of(tag), value, step)
            writer.add_scalar(f"{tag_of(tag)} vs samples", value, step * batch)
        if sectioned:
            writer.add_scalar("steps-vs-samples/y=steps,x=samples", step, step * batch)
            writer.add_scalar("steps-vs-tokens/y=steps,x=tokens", step, step * batch * 2048)
        if step % 50 == 0:
            writer.add_scalar(tag_of("lm loss validation"), 8.2 - step / 100, step)
            writer.add_scalar(tag_of("lm loss validation ppl"), math.exp(8.2 - step / 100), step)
    writer.close()
    run = load(tmp_path)
    assert run.profile == "megatron"
    data = run.to_run_data("megatron")
    assert data.scalars.index.max() == 200  # nothing on the samples axis
    assert data.series(schema.TRAIN_LOSS).loc[200] == pytest.approx(6.0)
    assert data.series(schema.heldout_key("validation")).to_dict() == pytest.approx(
        {50: 7.7, 100: 7.2, 150: 6.7, 200: 6.2})
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(0.8)
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(3e-4)
    assert data.series(schema.TRAIN_GRAD_NORM).iloc[0] == pytest.approx(1.5)


def test_nemo_metrics(tmp_path):
    # NeMo's Lightning trainer through its TensorBoard logger: the all-reduced training loss, the
    # step time with its unit in the name, the step itself, and the validation loss every 50.
    def logged(step):
        yield from (("reduced_train_loss", 8.0 - step / 100), ("lr", 3e-4), ("global_step", float(step)),
                    ("consumed_samples", 256.0 * (step + 1)), ("train_step_timing in s", 0.9),
                    ("train_backward_timing in s", 0.001))
        if step % 50 == 49:
            yield "val_loss", 8.2 - step / 100

    run = _trainer_run(tmp_path, range(0, 200), logged)
    assert run.profile == "nemo"
    data = run.to_run_data("nemo")
    assert data.series(schema.TRAIN_LOSS).loc[100] == pytest.approx(7.0)
    assert list(data.series(schema.heldout_key("val")).index) == [49, 99, 149, 199]
    assert data.series(schema.PERF_STEP_TIME_S).iloc[0] == pytest.approx(0.9)
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(3e-4)
    assert not any("global_step" in k for k in data.scalars.columns)


def test_composer_metrics(tmp_path):
    # llm-foundry's training through Composer's TensorBoard logger: the optimised loss per batch,
    # cross-entropy and perplexity of the train metrics and of two eval sets every 50 batches,
    # LRMonitor's learning rate, SpeedMonitor's throughput.
    writer = SummaryWriter(str(tmp_path))
    for step in range(1, 201):
        for tag, value in (("loss/train/total", 8.0 - step / 100), ("metrics/train/LanguageCrossEntropy", 8.0 - step / 100),
                           ("metrics/train/LanguagePerplexity", math.exp(8.0 - step / 100)),
                           ("lr-DecoupledAdamW/group0", 3e-4), ("throughput/tokens_per_sec", 9000.0),
                           ("throughput/device/tokens_per_sec", 1125.0)):
            writer.add_scalar(tag, value, step)
        if step % 50 == 0:
            for label, offset in (("c4", 0.2), ("wikitext", 0.4)):
                writer.add_scalar(f"metrics/eval/{label}/LanguageCrossEntropy", 8.0 + offset - step / 100, step)
                writer.add_scalar(f"metrics/eval/{label}/LanguagePerplexity", math.exp(8.0 + offset - step / 100), step)
    writer.close()
    run = load(tmp_path)
    assert run.profile == "composer"
    data = run.to_run_data("composer")
    assert data.series(schema.TRAIN_LOSS).loc[200] == pytest.approx(6.0)
    assert data.series(schema.heldout_key("c4")).to_dict() == pytest.approx({50: 7.7, 100: 7.2, 150: 6.7, 200: 6.2})
    assert data.series(schema.heldout_key("wikitext")).loc[200] == pytest.approx(6.4)
    assert data.series(schema.OPTIM_LR).iloc[0] == pytest.approx(3e-4)
    assert data.series(schema.PERF_TOKENS_PER_S).iloc[0] == 9000.0
    assert data.series("perf/device_tokens_per_s").iloc[0] == 1125.0
    assert not [k for k in data.scalars.columns if "perplexity" in k.lower()]


def test_hparams_plugin_settings_are_the_runs_config(tmp_path):
    """Hyperparameters written through the hparams plugin (torch's `summary.hparams`, written in the
    run's own folder as Lightning's TensorBoardLogger does) are the run's config, numbers as they
    were meant; its records are not counted as left-out summaries. A hparams.yaml beside the file,
    Lightning's nested original, wins."""
    from torch.utils.tensorboard.summary import hparams

    writer = SummaryWriter(str(tmp_path))
    for record in hparams({"lr": 3e-4, "layers": 12, "optimizer": "adamw", "compile": True}, {}):
        writer.file_writer.add_summary(record)
    for step in range(20):
        writer.add_scalar("train_loss", 3.0 - step * 0.01, step)
    writer.close()
    run = load(tmp_path)
    assert run.config == {"lr": pytest.approx(3e-4), "layers": 12, "optimizer": "adamw", "compile": True}
    assert not any("_hparams_" in n for n in run.notes)
    (tmp_path / "hparams.yaml").write_text("optimizer:\n  name: adamw\n  lr: 0.0003\n")
    assert load(tmp_path).config == {"optimizer": {"name": "adamw", "lr": 0.0003}}


def test_a_run_without_hyperparameters_has_no_config(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    writer.add_scalar("train_loss", 3.0, 1)
    writer.close()
    assert load(tmp_path).config == {}


def _lightning_launch(root, version: int, steps: range) -> None:
    """One launch as Lightning's TensorBoardLogger writes it (lightning_logs/version_N): its
    hyperparameters, with the `hp_metric` placeholder it logs at step 0 in every launch, then a
    training loss."""
    from lightning.pytorch.loggers import TensorBoardLogger

    logger = TensorBoardLogger(str(root), version=version)
    logger.log_hyperparams({"lr": 0.01})
    for step in steps:
        logger.log_metrics({"train_loss": 3.0 - step * 0.001}, step=step)
    logger.finalize("success")


def test_a_lightning_run_resumed_from_its_checkpoint_is_one_run(tmp_path):
    # Killed after step 99 and resumed from its step-50 checkpoint: version_1 begins at step 50,
    # after an hp_metric at step 0, which says nothing of where the launch began.
    _lightning_launch(tmp_path, 0, range(0, 100))
    time.sleep(1.1)  # event file names tell launches apart by the second they were created in
    _lightning_launch(tmp_path, 1, range(50, 200))
    run = load(tmp_path / "lightning_logs")
    assert run.attempts == 2
    assert [(e["step"], e["kind"]) for e in run.events] == [(50, "restart")]
    loss = run.to_run_data("lit").series(schema.TRAIN_LOSS)
    assert len(loss) == 200 and loss.loc[60] == pytest.approx(2.94)
    # Two runs started from scratch are still two runs.
    _lightning_launch(tmp_path / "sweep", 0, range(0, 100))
    time.sleep(1.1)
    _lightning_launch(tmp_path / "sweep", 1, range(0, 100))
    with pytest.raises(GapwatchError, match="a TensorBoard folder of 2 training runs"):
        load(tmp_path / "sweep" / "lightning_logs")


def test_a_launch_that_logged_no_scalar_is_left_out_with_a_note(tmp_path):
    # The Hugging Face Trainer writes its arguments as text when training begins; a job that
    # died before its first log left only that.
    writer = SummaryWriter(str(tmp_path / "runs" / "Dec06_10-00-00_host"))
    writer.add_text("args", "{}")
    writer.close()
    time.sleep(1.1)
    _launch(tmp_path / "runs" / "Dec06_10-05-00_host")
    run = load(tmp_path / "runs")
    assert run.name_hint == "Dec06_10-05-00_host" and run.attempts == 1
    assert any("left out 1 launch folder(s) with no scalars" in n and "Dec06_10-00-00_host" in n for n in run.notes)
    assert run.to_run_data("r").series(schema.TRAIN_LOSS).loc[100] == pytest.approx(2.0)


def test_a_restart_in_a_folder_with_add_scalars_subfolders_is_one_restart(tmp_path):
    # A second process resumed in the same folder from step 61: torch's add_scalars wrote files
    # in loss_train/ and loss_val/ for each process, after the root folder's.
    _launch(tmp_path, 0.0)
    time.sleep(1.1)
    _launch(tmp_path, 0.5, start=61)
    run = load(tmp_path)
    assert run.attempts == 2 and [e["step"] for e in run.events] == [61]
    data = run.to_run_data("r")
    assert set(data.repeats.loc[data.repeats["attempt"] == 2, "step"]) == set(range(61, 101))
    assert data.series(schema.TRAIN_LOSS).loc[61] == pytest.approx(2.89)


def test_the_metrics_of_add_hparams_are_keyed_by_name_not_by_the_time_of_the_call(tmp_path):
    # torch writes them to a subfolder named str(time.time()).
    writer = SummaryWriter(str(tmp_path))
    for step in range(10):
        writer.add_scalar("train/loss", 3.0 - step * 0.01, step)
    writer.add_hparams({"lr": 1e-3}, {"hparam/final_loss": 2.0})
    writer.close()
    run = load(tmp_path)
    assert "hparam/final_loss" in run.to_run_data("r").scalars.columns
    assert run.config == {"lr": pytest.approx(1e-3)}


def test_a_train_folder_beside_nested_evaluation_folders_is_one_run(tmp_path):
    # T5X's model folder: train/ and training_eval/<task>/, written at once by one job. The
    # evaluation's folder begins at a later step (its first evaluation): once read as a launch that
    # resumed the training one, its loss folded into the training loss.
    train, evaluation = SummaryWriter(str(tmp_path / "train")), SummaryWriter(str(tmp_path / "training_eval" / "c4_eval"))
    for step in range(100, 2001, 100):
        train.add_scalar("loss", 4 - step / 1000, step)
        if step % 500 == 0:
            evaluation.add_scalar("loss", 4.1 - step / 1000, step)
    train.close()
    evaluation.close()
    run = load(tmp_path)
    assert run.attempts == 1 and not run.events
    data = run.to_run_data("t5x")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(100, 2001, 100))
    heldout = [k for k in data.scalars.columns if k.startswith("eval/heldout/")]
    assert len(heldout) == 1 and data.series(heldout[0]).to_dict() == {
        s: pytest.approx(4.1 - s / 1000) for s in (500, 1000, 1500, 2000)}


def _metrics_folder(folder, steps, wall0: float, tag: str = "loss", every_s: float = 10.0) -> None:
    writer = SummaryWriter(str(folder))
    for i, step in enumerate(steps):
        writer.add_scalar(tag, 4 - step / 1000, step, walltime=wall0 + every_s * i)
    writer.close()


def test_folders_written_at_once_are_one_run_whatever_their_names(tmp_path):
    # One job's two writers over an hour, their files created now: the evaluation one begins at a
    # later step, and was written while the training one was. One run, not a resume.
    _metrics_folder(tmp_path / "training_metrics", range(100, 2001, 100), time.time(), every_s=180)
    _metrics_folder(tmp_path / "eval_metrics", range(500, 2001, 500), time.time() + 900, tag="heldout_loss",
                    every_s=900)
    run = load(tmp_path)
    assert run.attempts == 1 and not run.events
    assert any("were written at the same time" in n for n in run.notes)
    data = run.to_run_data("m")
    assert list(data.series("training_metrics/loss").index) == list(range(100, 2001, 100))
    assert list(data.series("eval/heldout/metrics/loss").index) == [500, 1000, 1500, 2000]
    # A launch whose last record came before the next one was created is still a resume.
    _metrics_folder(tmp_path / "resumed" / "version_0", range(1, 150), time.time() - 7200)
    time.sleep(1.1)
    _metrics_folder(tmp_path / "resumed" / "version_1", range(100, 200), time.time())
    resumed = load(tmp_path / "resumed")
    assert resumed.attempts == 2 and [e["step"] for e in resumed.events] == [100]


def test_a_sweeps_runs_written_side_by_side_are_still_separate_runs(tmp_path):
    # Two runs of a sweep on two GPUs at once: the same tags from the same step. Written at the
    # same time, but not one job's writers.
    for name in ("lr_0.1", "lr_0.2"):
        _metrics_folder(tmp_path / name, range(1, 200), time.time(), every_s=30)
    with pytest.raises(GapwatchError, match="a TensorBoard folder of 2 training runs"):
        load(tmp_path)
