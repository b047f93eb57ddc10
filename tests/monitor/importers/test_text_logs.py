"""llm.c / modded-nanogpt / nanoGPT text logs: every real log in the real data, and bad ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.text_logs import parse_text_log


def _modded_logs(shared_data):
    root = shared_data / "runs" / "modded-nanogpt"
    return sorted(root.glob("*/*.txt")) + sorted(root.glob("*/*.log"))


def test_every_real_log_parses_with_the_llmc_profile(shared_data):
    logs = _modded_logs(shared_data)
    assert len(logs) >= 20
    for path in logs:
        run = load(path)
        assert run.profile == "llmc", path
        data = run.to_run_data("r")
        loss = data.series(schema.TRAIN_LOSS)
        val = data.series(schema.heldout_key("val"))
        assert len(loss) > 1000 and len(val) >= 12, path
        assert data.scalars.index.is_monotonic_increasing
        assert run.attempts == 1 and not run.events


def test_llmc_main_log_values_and_known_spikes(shared_data):
    run = load(shared_data / "runs/modded-nanogpt/llmc_gpt2_124M_2024-10-13/main.log")
    data = run.to_run_data("llmc")
    grad = data.series(schema.TRAIN_GRAD_NORM)
    lr = data.series(schema.OPTIM_LR)
    val = data.series(schema.heldout_key("val"))
    assert len(data.series(schema.TRAIN_LOSS)) == 19560
    assert val.index[0] == 0 and val.iloc[-1] == pytest.approx(3.2722)
    assert len(val) == 80
    # The README's grad-norm spikes: 1.44 at 7,435 and 2.02 at 9,025 on a ~0.3 background.
    assert grad.loc[7435] == pytest.approx(1.44) and grad.loc[9025] == pytest.approx(2.02)
    assert lr.idxmax() == 699 and lr.max() == pytest.approx(6e-4)
    assert run.tokens_per_step is None  # the llm.c log file does not say


def test_modded_nanogpt_log_reads_script_config_and_step_times(shared_data):
    path = next((shared_data / "runs/modded-nanogpt/soap_vs_muon_2024-10").glob("SOAP_*.txt"))
    run = load(path)
    data = run.to_run_data("soap")
    assert run.config["batch_size"] == 512 and run.config["sequence_length"] == 1024
    assert run.tokens_per_step == 512 * 1024
    loss = data.series(schema.TRAIN_LOSS)
    assert loss.index.min() == 1 and loss.index.max() == 6000
    # The README's batch-order spikes: ~3.86 -> 5.07 at step 919.
    assert loss.loc[919] == pytest.approx(5.07, abs=0.01)
    assert data.series(schema.heldout_key("val")).iloc[-1] == pytest.approx(3.2763)
    step_time = data.series(schema.PERF_STEP_TIME_S)
    # The training clock restarts after step 10 (compilation left out): no step time at 11.
    assert 11 not in step_time.index and 12 in step_time.index
    assert (step_time > 0).all()
    # From step 12 on the step times add up to the log's own running mean (step_avg:363.34ms).
    assert step_time.loc[12:].mean() == pytest.approx(0.36334, abs=0.001)


def test_scaleup_log_keeps_muon_schedule_config(shared_data):
    path = next((shared_data / "runs/modded-nanogpt/scaleup1b_2024-10-20").glob("c0078066*.txt"))
    run = parse_text_log(path)
    assert run.config["num_iterations"] == int(0.75 * 2 * 10172)
    assert run.tokens_per_step == 480 * 1024


def test_restart_starts_a_new_attempt_and_latest_wins(tmp_path):
    log = tmp_path / "restarted.log"
    log.write_text(
        "s:0 tel:11.0\n"
        "s:0 trl:11.0 lr:0.0001 norm:1.0\n"
        "s:1 trl:10.0 lr:0.0002 norm:1.0\n"
        "s:2 trl:9.0 lr:0.0003 norm:1.0\n"
        "s:1 trl:10.5 lr:0.0002 norm:1.0\n"  # resumed from the step-1 checkpoint
        "s:2 trl:9.5 lr:0.0003 norm:1.0\n"
        "s:3 trl:8.5 lr:0.0004 norm:1.0\n"
    )
    run = load(log)
    assert run.attempts == 2
    (event,) = run.events
    assert event["kind"] == "restart" and event["step"] == 1 and event["payload"]["line"] == 5
    data = run.to_run_data("r")
    loss = data.series(schema.TRAIN_LOSS)
    assert loss.to_dict() == {0: 11.0, 1: 10.5, 2: 9.5, 3: 8.5}
    rep = data.repeats[data.repeats["key"] == schema.TRAIN_LOSS]
    assert sorted(zip(rep["step"], rep["attempt"], rep["value"])) == [
        (1, 1, 10.0), (1, 2, 10.5), (2, 1, 9.0), (2, 2, 9.5)]
    assert data.events["kind"].tolist() == ["restart"]


def test_logged_nan_is_kept_as_a_value(tmp_path):
    log = tmp_path / "nan.log"
    log.write_text("s:0 trl:3.0 lr:0.1 norm:1.0\ns:1 trl:nan lr:0.1 norm:inf\n")
    data = load(log).to_run_data("r")
    assert math.isnan(data.series(schema.TRAIN_LOSS).loc[1])
    assert np.isinf(data.series(schema.TRAIN_GRAD_NORM).loc[1])
    assert set(data.logged_nonfinite["key"]) == {schema.TRAIN_LOSS, schema.TRAIN_GRAD_NORM}


def test_partial_last_line_is_left_out_not_an_error(tmp_path):
    log = tmp_path / "live.txt"
    log.write_text("step:1/10 train_loss:5.0 train_time:10ms step_avg:nanms\nstep:2/10 train_lo")
    run = load(log)
    assert run.to_run_data("r").series(schema.TRAIN_LOSS).to_dict() == {1: 5.0}
    assert any("still being written" in n for n in run.notes)


@pytest.mark.parametrize(
    "text, message",
    [
        ("s:0 trl:3.0\ns:1 trl:abc\n", "line 2: trl value 'abc' is not a number"),
        ("s:0 trl:3.0\ns:1 trl\n", "line 2: looks like a log line but does not parse"),
        ("step:3/10 train_loss:1.0 train_time:5ms\nstep:4/10 train_loss:: x\n", "line 2"),
        ("just some text\nwithout any log lines\n", "unrecognised format"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, text, message):
    log = tmp_path / "bad.log"
    log.write_text(text)
    with pytest.raises(GapwatchError, match=message) as err:
        load(log)
    assert str(log) in str(err.value) and "\n" not in str(err.value)


def test_nanogpt_stdout_log(tmp_path):
    log = tmp_path / "nanogpt.txt"
    log.write_text(
        "tokens per iteration will be: 491,520\n"
        "step 0: train loss 10.9, val loss 10.95\n"
        "iter 0: loss 10.93, time 3000.00ms, mfu -100.00%\n"
        "iter 10: loss 9.50, time 250.00ms, mfu 30.50%\n"
        "step 250: train loss 4.2, val loss 4.3\n"
    )
    run = load(log)
    assert run.profile == "llmc"
    data = run.to_run_data("n")
    assert data.series(schema.TRAIN_LOSS).to_dict() == {0: 10.93, 10: 9.50}
    assert data.series(schema.PERF_MFU).to_dict() == {10: pytest.approx(0.305)}
    assert data.series(schema.PERF_STEP_TIME_S).loc[10] == pytest.approx(0.25)
    assert data.series(schema.heldout_key("val")).to_dict() == {0: 10.95, 250: 4.3}
    assert data.series(schema.heldout_key("train")).to_dict() == {0: 10.9, 250: 4.2}


def test_torchtune_disk_logger(tmp_path):
    # torchtune's DiskLogger (and StdoutLogger): `Step N | name:value ...` with a trailing space,
    # a validation loss on a line of its own.
    lines = [f"Step {s} | loss:{3.0 - s * 0.01:.4f} lr:2e-05 tokens_per_second_per_gpu:1234.5 "
             f"peak_memory_active:10.2 " for s in range(1, 41)]
    lines.insert(20, "Step 20 | val_loss:2.9 ")
    path = tmp_path / "log_1700000000.txt"
    path.write_text("\n".join(lines) + "\n")
    data = load(path).to_run_data("tt")
    assert data.series(schema.TRAIN_LOSS).dropna().loc[10] == pytest.approx(2.9)
    assert data.series(schema.OPTIM_LR).dropna().loc[40] == pytest.approx(2e-5)
    assert data.series(schema.PERF_DEVICE_TOKENS_PER_S).dropna().loc[1] == pytest.approx(1234.5)
    assert data.series(schema.heldout_key("val")).dropna().to_dict() == {20: pytest.approx(2.9)}
    path.write_text("Step 3 | loss:tensor(2.5) \n")
    with pytest.raises(GapwatchError, match="line 1: loss value 'tensor"):
        load(path)
