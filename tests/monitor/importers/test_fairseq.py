"""fairseq and metaseq: their stdout logs in both formats, and their TensorBoard folders, read as
one run with losses in nats (monitor/importers/fairseq_log.py, the `fairseq` profile). The lines
follow fairseq's progress bars (fairseq/logging/progress_bar.py: JsonProgressBar, SimpleProgressBar,
TensorboardProgressBarWrapper)."""

from __future__ import annotations

import json
import math
import time

import pytest
from torch.utils.tensorboard import SummaryWriter

from monitor import schema
from monitor.importers import detect_format, load

LN2 = math.log(2)
CONFIG = ("2021-10-28 16:00:01 | INFO | fairseq_cli.train | {'_name': None, 'common': {'seed': 1, 'fp16': True}, "
          "'task': {'_name': 'language_modeling', 'tokens_per_sample': 2048}}")


def _bits(nats: float) -> float:
    return round(nats / LN2, 3)


def _json_log(path, updates=range(100, 1001, 100), rollback_to=None) -> None:
    """train_inner every 100 updates, a validation every 500, an epoch summary at the end; with
    `rollback_to`, the job goes back to that update after the last and logs on from there."""
    lines = [CONFIG, "2021-10-28 16:00:02 | INFO | fairseq.trainer | begin training epoch 1"]
    steps = list(updates) + (list(range(rollback_to, updates[-1] + 201, 100)) if rollback_to else [])
    for i, u in enumerate(steps):
        restarted = rollback_to is not None and i >= len(updates)
        nats = 4.0 - u * 0.001 + (0.05 if restarted else 0.0)
        inner = {"epoch": 1, "update": round(u / 5000, 3), "loss": str(_bits(nats)), "ppl": "9.2",
                 "wps": "51023.4", "ups": "1.56", "wpb": "32768", "bsz": "16", "num_updates": str(u),
                 "lr": "0.0003", "gnorm": "0.512", "loss_scale": "128", "train_wall": "60", "gb_free": "N/A",
                 "wall": str(u)}
        lines.append(f"2021-10-28 16:{i:02d}:00 | INFO | train_inner | {json.dumps(inner)}")
        if u % 500 == 0 and not restarted:
            lines.append('2021-10-28 16:00:00 | INFO | fairseq_cli.train | begin validation on "valid" subset')
            valid = {"epoch": 1, "valid_loss": str(_bits(nats + 0.1)), "valid_ppl": "10.1", "valid_wps": "90000",
                     "valid_num_updates": str(u), "valid_best_loss": str(_bits(nats + 0.1))}
            lines.append(f"2021-10-28 16:{i:02d}:30 | INFO | valid | {json.dumps(valid)}")
    summary = {"epoch": 1, "train_loss": str(_bits(3.5)), "train_ppl": "11.3", "train_num_updates": str(steps[-1]),
               "train_train_wall": "600", "train_wall": "700"}
    lines.append(f"2021-10-28 17:00:00 | INFO | train | {json.dumps(summary)}")
    path.write_text("\n".join(lines) + "\n")


def test_a_json_log_is_one_run_in_nats_on_its_updates(tmp_path):
    log = tmp_path / "train.log"
    _json_log(log)
    assert detect_format(log) == "fairseq-log"
    run = load(log)
    assert run.profile == "fairseq"
    data = run.to_run_data("opt")
    loss = data.series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(100, 1001, 100))
    assert loss.loc[300] == pytest.approx(3.7, abs=1e-3)  # logged in bits: 5.338
    heldout = data.series(schema.heldout_key("valid")).dropna()
    assert list(heldout.index) == [500, 1000] and heldout.loc[500] == pytest.approx(3.6, abs=1e-3)
    # The epoch's mean is not the training loss; train_train_wall is the summary's train_wall.
    assert data.series("train/epoch_loss").dropna().to_dict() == {1000: pytest.approx(3.5, abs=1e-3)}
    assert data.series("train/train_wall").dropna().to_dict() == {1000: 600.0}
    assert data.series(schema.PERF_TOKENS_PER_S).dropna().iloc[0] == pytest.approx(51023.4)
    assert not [k for k in data.scalars.columns if k.endswith(("/epoch", "/update", "ppl", "best_loss"))]
    assert run.config["task"]["tokens_per_sample"] == 2048
    assert any("gb_free" in n and "'N/A'" in n for n in run.notes)


def test_a_rolled_back_job_is_a_restart_whose_values_win(tmp_path):
    log = tmp_path / "train.log"
    _json_log(log, rollback_to=700)
    run = load(log)
    assert run.attempts == 2 and [(e["step"], e["kind"]) for e in run.events] == [(700, "restart")]
    loss = run.to_run_data("opt").series(schema.TRAIN_LOSS).dropna()
    assert list(loss.index) == list(range(100, 1201, 100))
    assert loss.loc[800] == pytest.approx(3.25, abs=1e-3)  # the second attempt's


def test_the_simple_format_reads_as_the_json_one(tmp_path):
    lines = [f"2021-10-28 16:00:00 | INFO | train_inner | epoch 001:    {u:4d} / 5000 loss={_bits(4 - u / 1000)}, "
             f"ppl=9.2, wps=51023.4, ups=1.56, wpb=32768, bsz=16, num_updates={u}, lr=0.0003, gnorm=0.512, "
             f"loss_scale=128, train_wall=60, wall={u}" for u in range(100, 1001, 100)]
    lines.insert(5, "2021-10-28 16:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | "
                    f"loss {_bits(3.6)} | ppl 10.1 | wps 90000 | wpb 30000 | bsz 15 | num_updates 500 | "
                    f"best_loss {_bits(3.6)}")
    log = tmp_path / "simple.log"
    log.write_text("\n".join(lines) + "\n")
    data = load(log).to_run_data("f")
    assert data.series(schema.TRAIN_LOSS).dropna().loc[300] == pytest.approx(3.7, abs=1e-3)
    assert data.series(schema.heldout_key("valid")).dropna().to_dict() == {500: pytest.approx(3.6, abs=1e-3)}
    assert data.series(schema.OPTIM_LR).dropna().loc[1000] == pytest.approx(3e-4)


def test_its_tensorboard_folder_of_train_inner_train_and_valid_is_one_run(tmp_path):
    writers = {tag: SummaryWriter(str(tmp_path / tag)) for tag in ("train_inner", "valid", "train")}
    for writer in writers.values():
        writer.add_text("sys.argv", "fairseq-train data-bin --task language_modeling --lr 0.0005 "
                                    "--max-tokens 2048 --fp16 --arch=transformer_lm_gpt")
    for u in range(100, 1001, 100):
        writers["train_inner"].add_scalar("loss", (4 - u / 1000) / LN2, u)
        writers["train_inner"].add_scalar("ppl", 9.2, u)
        if u % 500 == 0:
            writers["valid"].add_scalar("loss", (4.1 - u / 1000) / LN2, u)
            writers["valid"].add_scalar("best_loss", (4.1 - u / 1000) / LN2, u)
    writers["train"].add_scalar("loss", 3.5 / LN2, 1000)
    for writer in writers.values():
        writer.close()
    run = load(tmp_path)  # three sibling folders: once refused as three training runs
    assert run.profile == "fairseq"
    data = run.to_run_data("f")
    assert data.series(schema.TRAIN_LOSS).dropna().loc[200] == pytest.approx(3.8, abs=1e-6)
    assert data.series(schema.heldout_key("valid")).dropna().to_dict() == {500: pytest.approx(3.6, abs=1e-6),
                                                                           1000: pytest.approx(3.1, abs=1e-6)}
    assert data.series("train/epoch_loss").dropna().to_dict() == {1000: pytest.approx(3.5, abs=1e-6)}
    # Its command line, written as a text summary, is the run's settings.
    assert run.config == {"task": "language_modeling", "lr": 0.0005, "max_tokens": 2048, "fp16": True,
                          "arch": "transformer_lm_gpt"}
    assert not [n for n in run.notes if "sys.argv" in n]


def test_other_logs_are_not_taken_for_fairseqs(tmp_path):
    megatron = tmp_path / "megatron.log"
    megatron.write_text(" iteration       10/    2000 | consumed samples: 2560 | lm loss: 1.023456E+01 |\n")
    assert detect_format(megatron) == "megatron-log"
    plain = tmp_path / "app.log"
    plain.write_text("2021-10-28 16:00:00 | INFO | train | starting\n")
    with pytest.raises(Exception, match="unrecognised format"):
        detect_format(plain)


def test_a_log_of_train_and_valid_losses_without_train_inner_is_not_read_in_bits(tmp_path):
    # fairseq's profile explains train/loss and valid/loss too, as an epoch's mean and a held-out
    # loss in bits; without fairseq's train_inner/ it is not picked, and nothing is rescaled.
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "train/loss": 3.0, **({"valid/loss": 3.2} if s % 10 == 0 else {})})
                           + "\n" for s in range(1, 51)))
    run = load(log)
    assert run.profile != "fairseq"
    data = run.to_run_data("x")
    assert data.series(schema.TRAIN_LOSS).dropna().loc[5] == 3.0
    assert data.series(schema.heldout_key("valid")).dropna().loc[10] == 3.2


def test_metaseqs_rerun_folders_are_one_run_resumed(tmp_path):
    # metaseq does not write into a rerun's old TensorBoard folder: it takes the next free suffix
    # (tb/, then tbA/), each with its train_inner/ and valid/. Killed after update 600 and resumed
    # from update 400's checkpoint, the run is one run of two attempts.
    def launch(folder, updates):
        writers = {tag: SummaryWriter(str(folder / tag)) for tag in ("train_inner", "valid")}
        for u in updates:
            writers["train_inner"].add_scalar("loss", (4 - u / 1000) / LN2, u)
            if u % 200 == 0:
                writers["valid"].add_scalar("loss", (4.1 - u / 1000) / LN2, u)
        for writer in writers.values():
            writer.close()

    launch(tmp_path / "tb", range(100, 601, 100))
    time.sleep(1.1)  # event file names tell launches apart by the second they were created in
    launch(tmp_path / "tbA", range(500, 1001, 100))
    run = load(tmp_path)
    assert run.profile == "fairseq" and run.attempts == 2
    assert [(e["step"], e["kind"]) for e in run.events] == [(500, "restart")]
    data = run.to_run_data("opt")
    assert list(data.series(schema.TRAIN_LOSS).index) == list(range(100, 1001, 100))
    assert list(data.series(schema.heldout_key("valid")).index) == [200, 400, 600, 800, 1000]


def test_a_line_still_being_written_is_left_out(tmp_path):
    log = tmp_path / "train.log"
    _json_log(log)
    log.write_text(log.read_text() + '2021-10-28 17:00:01 | INFO | train_inner | {"num_updates": "11')
    run = load(log)
    assert run.to_run_data("opt").series(schema.TRAIN_LOSS).index[-1] == 1000  # not update 11
    assert any("has no newline yet (still being written): left out" in n for n in run.notes)


def test_a_line_that_only_looks_like_stats_is_passed_over(tmp_path):
    # JSON nested a hundred thousand deep under a stats logger's name: no stats, no RecursionError.
    log = tmp_path / "train.log"
    _json_log(log)
    log.write_text(log.read_text() + '2021-10-28 17:00:00 | INFO | train_inner | {"a": '
                   + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert list(load(log).to_run_data("opt").series(schema.TRAIN_LOSS).index) == list(range(100, 1001, 100))
