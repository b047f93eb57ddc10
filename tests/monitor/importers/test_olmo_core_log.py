"""An OLMo-core run's console log, as its ConsoleLoggerCallback writes it (a `[step=N/M,epoch=E]`
marker, then a `    name=value` line a metric, or the one-line shape with use_tqdm), read with
the `olmo` profile (monitor/importers/olmo_core_log.py)."""

from __future__ import annotations

import math

import pytest

from monitor import schema
from monitor.importers import detect_format, load


def _block(step: int, loss: float, eta: bool = True) -> list[str]:
    marker = f"[step={step}/2000,epoch=0" + (",eta=1h2m3s]" if eta else "]")
    return [f"2025-03-01T10:00:00.000Z\tINFO\tolmo_core.train.callbacks.console_logger:120\t{marker}",
            f"    train/CE loss={loss:.3f}",
            f"    train/PPL={int(math.exp(loss)):,}",
            "    optim/LR (group 0)=3.00E-04",
            "    optim/total grad norm=0.8123",
            f"    throughput/total tokens={step * 4_194_304:,}",
            "    throughput/device/TPS (actual avg)=12,345",
            "    system/GPU temp=n/a"]


def test_an_olmo_core_console_log_is_one_run_in_olmos_names(tmp_path):
    lines = ["2025-03-01T09:59:00.000Z\tINFO\tolmo_core.train.trainer:300\tStarting training"]
    for step in range(10, 201, 10):
        lines += _block(step, 10 - step / 100)
        lines.append("2025-03-01T10:00:01.000Z\tINFO\tolmo_core.train.checkpoint:80\tSaving checkpoint")
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    assert detect_format(log) == "olmo-core-log"
    run = load(log)
    assert run.profile == "olmo"
    data = run.to_run_data("olmo")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(10, 201, 10)) and loss.loc[50] == pytest.approx(9.5)
    assert data.series(schema.OPTIM_LR).loc[10] == pytest.approx(3e-4)
    assert data.series("train/tokens").loc[20] == 20 * 4_194_304  # "83,886,080" read with its commas
    assert any("system/GPU temp" in n for n in run.notes)


def test_the_one_line_shape_and_a_resume_in_the_same_log(tmp_path):
    def line(step):
        return (f"2025-03-01T10:00:00Z INFO [step={step}/2000,epoch=0,eta=3h] epoch=0 loss={10 - step / 100:.3f} "
                f"ppl=1,234 lr=3.00E-04 mem=21.4GiB tps=9,876 mfu=41.2% grad=1.234")
    log = tmp_path / "train.log"
    log.write_text("\n".join([*map(line, range(10, 151, 10)), *map(line, range(110, 201, 10))]) + "\n")
    run = load(log)
    assert [(e["step"], e["kind"]) for e in run.events] == [(110, "restart")]
    data = run.to_run_data("olmo")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(10, 201, 10))
    assert data.series("throughput/device/tps_actual_avg").loc[30] == 9876  # "9,876"
    assert data.series("throughput/device/mfu_actual_avg").loc[30] == pytest.approx(41.2)  # "41.2%"


def test_a_line_still_being_written_is_left_out(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("\n".join(_block(10, 9.9)) + "\n[step=20/2000,epoch=0]\n    train/CE loss=9")  # 9 of 9.812
    run = load(log)
    assert list(run.to_run_data("olmo").series(schema.TRAIN_LOSS).index) == [10]
    assert any("has no newline yet" in n for n in run.notes)
