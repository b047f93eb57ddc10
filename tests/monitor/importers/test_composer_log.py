"""MosaicML Composer's console log (llm-foundry's runs print it), as its ConsoleLogger writes it:
a `[batch=N/M]:` block a logged batch, a `Train <key>: <value>` or `Eval <key>: <value>` line a value
(monitor/importers/composer_log.py, the `composer` profile)."""

from __future__ import annotations

import pytest

from monitor import schema
from monitor.importers import detect_format, load


def _block(batch: int, total: int, values: dict[str, object], kind: str = "Train", rank: str = "") -> list[str]:
    return [f"{rank}[batch={batch}/{total}]:"] + [f"{rank}\t {kind} {k}: {v}" for k, v in values.items()]


def _log(path, batches, resume_from=None, rank="") -> None:
    lines = ["******************************", "Config:", "max_duration: 100ba", "******************************"]
    for b in batches:
        lines += _block(b, 100, {"time/batch": b - 1, "time/token": (b - 1) * 8192,
                                 "loss/train/total": f"{11 - b / 10:.4f}",
                                 "metrics/train/LanguagePerplexity": "58312.0586",
                                 "lr-DecoupledAdamW/group0": "0.0006",
                                 "expert_selection/ffn_layer": "<wandb.sdk.data_types.image.Image object at 0x7f>"},
                        rank=rank)
        if b % 10 == 0:
            lines += _block(b, 100, {"metrics/eval/LanguageCrossEntropy": f"{11.2 - b / 10:.4f}"}, "Eval", rank)
        lines.append(f"{rank}Some other log line between blocks")
    path.write_text("\n".join(lines) + "\n")


def test_a_composer_console_log_is_one_run_on_its_batches(tmp_path):
    log = tmp_path / "train.log"
    _log(log, range(1, 31))
    assert detect_format(log) == "composer-log"
    run = load(log)
    assert run.profile == "composer"
    data = run.to_run_data("mpt")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == list(range(1, 31)) and loss.loc[5] == pytest.approx(10.5)
    assert data.series(schema.heldout_key("eval")).to_dict() == {10: pytest.approx(10.2), 20: pytest.approx(9.2),
                                                                 30: pytest.approx(8.2)}
    assert data.series("train/tokens").loc[3] == 16384
    assert data.series(schema.OPTIM_LR).loc[30] == pytest.approx(6e-4)
    assert any("expert_selection/ffn_layer" in n and "not a number" in n for n in run.notes)


def test_a_job_resumed_in_the_same_log_is_a_restart(tmp_path):
    log = tmp_path / "train.log"
    _log(log, [*range(1, 21), *range(11, 31)], rank="0: ")
    run = load(log)
    assert [(e["step"], e["kind"]) for e in run.events] == [(11, "restart")]
    assert list(run.to_run_data("mpt").series(schema.TRAIN_LOSS).index) == list(range(1, 31))


def test_value_lines_outside_a_block_are_not_composers(tmp_path):
    log = tmp_path / "other.log"
    log.write_text("\t Train loss/train/total: 3.0\nstep 1: train loss 3.0, val loss 3.1\n")
    assert detect_format(log) != "composer-log"


def test_a_line_still_being_written_is_left_out(tmp_path):
    log = tmp_path / "train.log"
    _log(log, range(1, 11))
    log.write_text(log.read_text() + "[batch=11/100]:\n\t Train loss/train/total: 9.8")  # 9.8 of 9.8765
    run = load(log)
    assert 11 not in run.to_run_data("mpt").series(schema.TRAIN_LOSS).index
    assert any("has no newline yet" in n for n in run.notes)
