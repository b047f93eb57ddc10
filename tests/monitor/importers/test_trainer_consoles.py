"""The console logs of torchtitan and MaxText, in the exact shapes their loggers print (the
f-strings of torchtitan's MetricsProcessor and MaxText's MetricLogger), read with no flags: the
format and the trainer's profile are detected, and every value lands under gapwatch's name."""

from __future__ import annotations

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load

# torchtitan's Color: red, green, orange, turquoise, blue, cyan, magenta, reset.
ANSI = ("\033[31m", "\033[32m", "\033[38;2;237;142;0m", "\033[38;2;64;224;208m", "\033[34m", "\033[36m",
        "\033[35m", "\033[39m")
PREFIX = "[rank0]:[titan] 2025-03-04 10:00:01,123 - root - INFO - "


def _titan_step(step: int, loss: float, color=ANSI, prefix=PREFIX, mfu: str | None = None) -> str:
    red, green, orange, turquoise, blue, cyan, magenta, reset = color
    return (f"{prefix}{red}step: {step:2}  {green}loss: {loss:8.5f}  {orange}grad_norm: {1.5:7.4f}  "
            f"{turquoise}memory: {40.12:5.2f}GiB({42.3:.2f}%)  {blue}tps: {round(12345.6):,}  "
            f"{cyan}tflops: {1234.5:,.2f}  {magenta}mfu: {mfu or f'{12.34:.2f}%'}{reset}\n")


def _titan_validation(step: int, loss: float, color=ANSI) -> str:
    red, green, orange, turquoise, blue, cyan, magenta, reset = color
    return (f"{PREFIX}\033[33mvalidate step: {step:2d}  {green}loss: {loss:7.4f}  "
            f"{turquoise}memory: {40.12:5.2f}GiB({42.3:.2f}%)  {blue}tps: {round(9876.5):,}{reset}\n")


def _titan_log(path, steps, color=ANSI, every_validation=50):
    lines = [f"{PREFIX}Training starts at step {steps[0]}\n"]
    for s in steps:
        lines.append(_titan_step(s, 10 - s / 100, color))
        if s % every_validation == 0:
            lines.append(_titan_validation(s, 9.5 - s / 100, color))
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("color", [ANSI, ("",) * 8], ids=["coloured", "color printing off"])
def test_a_torchtitan_log_reads_with_its_profile(tmp_path, color):
    path = _titan_log(tmp_path / "titan.log", list(range(10, 201, 10)), color)
    assert detect_format(path) == "torchtitan-log"
    run = load(path)
    assert run.profile == "torchtitan"
    data = run.to_run_data("titan")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(10, 201, 10)) and loss.loc[100] == pytest.approx(9.0)
    assert data.series("perf/mfu").dropna().iloc[0] == pytest.approx(0.1234)
    assert data.series("perf/device_tokens_per_s").dropna().iloc[0] == 12346
    assert data.series("train/grad_norm").dropna().iloc[0] == 1.5
    held = data.series("eval/heldout/validation/loss").dropna()
    assert list(held.index) == [50, 100, 150, 200] and held.loc[100] == pytest.approx(8.5)


def test_the_ranks_torchrun_tees_into_one_file_are_read_once(tmp_path):
    lines = []
    for s in range(1, 21):
        for rank in (0, 1):
            lines.append(_titan_step(s, 10 - s / 100, prefix=f"[rank{rank}]:[titan] 2025-03-04 - root - INFO - "))
    path = tmp_path / "titan.log"
    path.write_text("".join(lines))
    run = load(path)
    assert not run.events, "another rank's line read as a restart"
    assert list(run.to_run_data("t").series(schema.TRAIN_LOSS).dropna().index) == list(range(1, 21))
    assert any("20 lines of ranks other than rank 0 left out" in n for n in run.notes)


def test_a_torchtitan_job_resumed_in_the_same_log_is_a_restart(tmp_path):
    path = tmp_path / "titan.log"
    _titan_log(path, list(range(1, 41)))
    with open(path, "a") as fh:  # killed after step 40, resumed from step 30's checkpoint
        fh.write(f"{PREFIX}Training starts at step 31\n")
        fh.writelines(_titan_step(s, 10 - s / 100 - 0.5) for s in range(31, 61))
    run = load(path)
    assert [(e["step"], e["kind"]) for e in run.events] == [(31, "restart")]
    loss = run.to_run_data("t").series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(1, 61)) and loss.loc[35] == pytest.approx(9.15)  # the resumed value


def test_a_job_resumed_from_its_last_logged_step_is_a_restart_though_no_step_goes_back(tmp_path):
    path = tmp_path / "titan.log"
    _titan_log(path, list(range(10, 101, 10)))  # a checkpoint at step 100, then killed
    with open(path, "a") as fh:
        fh.write(f"{PREFIX}Training starts at step 101\n")
        fh.writelines(_titan_step(s, 9.0 - s / 100) for s in range(110, 201, 10))
    run = load(path)
    assert [(e["step"], e["kind"], e["attempt"]) for e in run.events] == [(101, "restart", 2)]
    assert run.events[0]["payload"]["previous_step"] == 100
    assert run.attempts == 2


def test_a_value_that_is_no_number_and_a_line_still_being_written_are_left_out_and_said(tmp_path):
    path = tmp_path / "titan.log"
    path.write_text(_titan_step(1, 9.9, mfu="N/A") + _titan_step(2, 9.8) + _titan_step(3, 9.7).rstrip("\n")[:60])
    run = load(path)
    assert list(run.to_run_data("t").series(schema.TRAIN_LOSS).dropna().index) == [1, 2]
    assert any("mfu: value 'N/A' (line 1) is not a number" in n for n in run.notes)
    assert any("line 3 has no newline yet" in n for n in run.notes)


def test_logs_of_other_trainers_are_not_taken_for_torchtitans(tmp_path):
    nanogpt = tmp_path / "modded.txt"
    nanogpt.write_text("".join(f"step:{s}/100 train_loss:{4 - s / 50:.4f} train_time:{s * 100}ms step_avg:100ms\n"
                               for s in range(1, 20)))
    assert detect_format(nanogpt) == "llmc-log"
    prose = tmp_path / "notes.txt"
    prose.write_text("the learning rate step: 3\nno fields here\n")
    with pytest.raises(GapwatchError, match="unrecognised format"):
        detect_format(prose)


# --- MaxText ------------------------------------------------------------------------------------
def _maxtext_step(step: int, loss: float, tflops_name: str = "TFLOP/s/device") -> str:
    return (f"completed step: {step}, seconds: {1.2345:.3f}, {tflops_name}: {123.4567:.3f}, "
            f"Tokens/s/device: {4567.891:.3f}, total_weights: 65536, loss: {loss:.3f}\n")


def _maxtext_eval(step: int, loss: float) -> str:
    return f"eval metrics after step: {step}, loss={loss:.3f}, total_weights=131072\n"


def test_a_maxtext_log_reads_with_its_profile(tmp_path):
    lines = ["Config param steps: 200\n"]
    for s in range(0, 200):
        lines.append(_maxtext_step(s, 10 - s / 100))
        if s % 50 == 49:
            lines.append(_maxtext_eval(s, 9.5 - s / 100))
    path = tmp_path / "maxtext.log"
    path.write_text("".join(lines))
    assert detect_format(path) == "maxtext-log"
    run = load(path)
    assert run.profile == "maxtext"
    data = run.to_run_data("mt")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(200)) and loss.loc[100] == pytest.approx(9.0)
    assert data.series("perf/step_time_s").dropna().iloc[0] == pytest.approx(1.2345, abs=1e-3)
    assert data.series("perf/device_tokens_per_s").dropna().iloc[0] == pytest.approx(4567.891)
    held = data.series("eval/heldout/default/loss").dropna()
    assert list(held.index) == [49, 99, 149, 199] and held.loc[99] == pytest.approx(8.51)
    assert "eval/total_weights" not in run.key_map.values()


def test_a_maxtext_job_resumed_in_the_same_log_is_a_restart_and_older_names_read_alike(tmp_path):
    path = tmp_path / "maxtext.log"
    steps = [*range(0, 30), *range(20, 40)]  # resumed from step 20's checkpoint
    path.write_text("".join(_maxtext_step(s, 10 - s / 100, tflops_name="TFLOP/s") for s in steps))
    run = load(path)
    assert [(e["step"], e["kind"]) for e in run.events] == [(20, "restart")]
    data = run.to_run_data("mt")
    assert list(data.series(schema.TRAIN_LOSS).dropna().index) == list(range(40))
    assert data.series("perf/per_device_tflops_per_s").dropna().iloc[0] == pytest.approx(123.457)
