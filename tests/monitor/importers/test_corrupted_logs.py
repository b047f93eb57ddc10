"""The line readers of other trainers' stdout logs (fairseq, Composer, OLMo-core, torchtune, torchtitan,
MaxText, CLU's LoggingWriter (T5X's too), Levanter's JSON logger, the Hugging Face Trainer), the Parquet reader and the reader of DeepSpeed's CSV monitor folders, fed their own logs corrupted at
random (bytes flipped, cut short, odd tokens spliced in, a stretch repeated or zeroed): each import
ends in a GapwatchError or an import, never another exception. The generated corpus of
bench/fuzz_corpus.py judges the CSV, JSONL and W&B readers' values too; these readers are held to
the first half of its rule."""

from __future__ import annotations

import json
import math
import random

import pandas as pd
import pytest

from monitor.errors import GapwatchError
from monitor.importers import load

CASES_EACH = 40
SPLICED = (b"nan", b"1e309", b"-5", b"\x00\xff", b"99999999999999999999999", b"\n\n", b"|", b"=", b"{", b"]:", b",")


def _fairseq_json() -> bytes:
    lines = []
    for u in range(100, 2001, 100):
        stats = {"epoch": 1, "update": u / 5000, "loss": f"{(4 - u / 1000) / math.log(2):.3f}", "num_updates": str(u),
                 "lr": "0.0003"}
        lines.append(f"2021-10-28 16:00:00 | INFO | train_inner | {json.dumps(stats)}")
        if u % 500 == 0:
            lines.append(f"2021-10-28 16:00:30 | INFO | valid | "
                         f"{json.dumps({'epoch': 1, 'valid_loss': '5.1', 'valid_num_updates': str(u)})}")
    return ("\n".join(lines) + "\n").encode()


def _fairseq_simple() -> bytes:
    return "".join(f"2021-10-28 16:00:00 | INFO | train_inner | epoch 001:    {u:4d} / 5000 loss=5.3, ppl=40, "
                   f"num_updates={u}, lr=0.0003\n" for u in range(100, 2001, 100)).encode()


def _composer() -> bytes:
    return "".join(f"[batch={b}/100]:\n\t Train loss/train/total: {11 - b / 10:.4f}\n\t Train time/token: {b * 8192}\n"
                   for b in range(1, 40)).encode()


def _olmo_core() -> bytes:
    return "".join(f"[step={s}/100,epoch=0]\n    train/CE loss={3 - s / 100:.3f}\n    throughput/total tokens={s * 1000:,}\n"
                   for s in range(1, 40)).encode()


def _torchtune() -> bytes:
    return "".join(f"Step {s} | loss:{3 - s / 100:.4f} lr:2e-05 \n" for s in range(1, 40)).encode()


def _torchtitan() -> bytes:
    return "".join(f"[rank0]:[titan] 2025-03-04 10:00:01,123 - root - INFO - \033[31mstep: {s:2}  \033[32mloss: "
                   f"{10 - s / 100:8.5f}  \033[34mtps: {12345 + s:,}  \033[35mmfu: 12.34%\033[39m\n"
                   for s in range(1, 40)).encode()


def _maxtext() -> bytes:
    return "".join(f"completed step: {s}, seconds: 1.234, TFLOP/s/device: 123.457, Tokens/s/device: 4567.891, "
                   f"total_weights: 65536, loss: {10 - s / 100:.3f}\n" + (f"eval metrics after step: {s}, loss=9.100, "
                   "total_weights=131072\n" if s % 10 == 9 else "") for s in range(40)).encode()


def _clu() -> bytes:
    """CLU's LoggingWriter lines in absl's format, as a Flax example writes them."""
    prefix = "I1207 10:00:01.123456 140231 logging_writer.py:48] "
    return (prefix + "[Hyperparameters] {'learning_rate': 0.0016, 'per_device_batch_size': 32}\n" + "".join(
        f"{prefix}[{s}] train_learning_rate=0.0016, train_loss={4 - s / 100:.6g}\n"
        + (f"{prefix}[{s}] eval_loss={4.1 - s / 100:.6g}, eval_perplexity=60.3\n" if s % 10 == 0 else "")
        for s in range(1, 40))).encode()


def _t5x() -> bytes:
    """T5X's console: its gin config a line at a time from gin_utils.py, then CLU's LoggingWriter
    lines of its train and training_eval collections."""
    gin = "I1207 10:00:00.000001 140231 gin_utils.py:85] "
    log = "I1207 10:00:01.123456 140231 logging_writer.py:35] "
    config = ["Gin Configuration:", "# Macros:", "LOSS_NORMALIZING_FACTOR = 233472",
              "EncoderDecoderModel.loss_normalizing_factor = %LOSS_NORMALIZING_FACTOR", ""]
    return ("".join(f"{gin}{line}\n" for line in config) + "".join(
        f"{log}[{s}] collection=train learning_rate=0.01, loss={4 - s / 100:.6g}, "
        f"loss_per_nonpadding_target_token={(4 - s / 100) / 14592:.6g}\n"
        + (f"{log}[{s}] collection=training_eval/c4 loss={4.1 - s / 100:.6g}\n" if s % 10 == 0 else "")
        for s in range(1, 40))).encode()


def _levanter() -> bytes:
    """Levanter's JSON logger records behind a logging prefix: the config, then each step's logs."""
    prefix = "2025-03-04 10:00:01,123 - levanter.json_logger - INFO - "
    record = {"tracker": "json_logger", "event": "hparams", "hparams": {"trainer": {"train_batch_size": 8}}}
    lines = [prefix + json.dumps(record)]
    for s in range(1, 40):
        metrics = {"train/loss": 4 - s / 100, "global_step": s, "throughput/mfu": 41.5}
        if s % 10 == 0:
            metrics["eval/paloma/c4_en/loss"] = 4.1 - s / 100
        lines.append(prefix + json.dumps({"tracker": "json_logger", "event": "log", "step": s, "metrics": metrics}))
    return ("\n".join(lines) + "\n").encode()


def _hf_console() -> bytes:
    """The Hugging Face Trainer's console as tqdm and its ProgressCallback write it (transformers 5
    prints values as text): the bar redrawn with carriage returns, a dict every 5 steps written
    above it and the bar drawn again, an evaluation every 20 with its own bar a line below."""
    def bar(n: int, total: int = 40) -> str:
        return f"\r{100 * n // total:3d}%|#         | {n}/{total} [00:01<00:05,  5.69it/s]"

    out = [bar(0)]
    for s in range(1, 41):
        out.append(bar(s))
        if s % 5 == 0:
            out.append("\r" + " " * 46 + "\r" + f"{{'loss': '{4 - s / 100:.4g}', 'grad_norm': '0.82', "
                       f"'learning_rate': '0.0009333', 'epoch': '{s / 100:.2g}'}}\n" + bar(s))
        if s % 20 == 0:
            out.append("\n" + bar(0, 5).replace("\r", "\r\x1b[A") + "\x1b[A\r" + " " * 46 + "\r\n\r" + " " * 37
                       + f"\r\x1b[A{{'eval_loss': '{4.1 - s / 100:.4g}', 'eval_runtime': '0.0145', "
                       f"'epoch': '{s / 100:.2g}'}}\n" + bar(s) + "\n")
    return "".join(out).encode()


def _deepspeed_loss_csv() -> bytes:
    """The train_loss file of DeepSpeed's CSV monitor for a job resumed once: its header again mid-file."""
    rows = ["step,train_loss", *(f"{s * 64},{4 - s / 200}" for s in range(1, 31)),
            "step,train_loss", *(f"{s * 64},{4 - s / 200}" for s in range(21, 41))]
    return ("\r\n".join(rows) + "\r\n").encode()


def _parquet(tmp_path) -> bytes:
    path = tmp_path / "sample.parquet"
    pd.DataFrame({"_step": range(50), "train/loss": [3 - s / 100 for s in range(50)]}).to_parquet(path)
    return path.read_bytes()


def _corrupt(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    kind = rng.choice(("flip", "cut", "splice", "repeat", "zero"))
    if kind == "flip":
        for _ in range(rng.randint(1, 20)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == "cut":
        del b[rng.randrange(1, len(b)):]
    elif kind == "splice":
        at = rng.randrange(len(b))
        b[at:at] = rng.choice(SPLICED)
    elif kind == "repeat":
        lo, hi = sorted(rng.randrange(len(b)) for _ in range(2))
        b[hi:hi] = b[lo:hi]
    else:
        at = rng.randrange(len(b))
        b[at:at + 64] = bytes(len(b[at:at + 64]))
    return bytes(b)


@pytest.mark.parametrize("name, sample", [("train.log", _fairseq_json), ("simple.log", _fairseq_simple),
                                          ("composer.log", _composer), ("olmo.log", _olmo_core),
                                          ("log_1.txt", _torchtune), ("titan.log", _torchtitan),
                                          ("maxtext.log", _maxtext), ("hf.log", _hf_console),
                                          ("clu.log", _clu), ("t5x.log", _t5x), ("levanter.log", _levanter),
                                          ("history.parquet", _parquet)])
def test_corrupted_logs_end_in_one_clear_error_or_an_import(tmp_path, name, sample):
    data = sample(tmp_path) if sample is _parquet else sample()
    load(_write(tmp_path / f"clean_{name}", data))  # the sample itself imports
    rng = random.Random(name)
    for n in range(CASES_EACH):
        path = _write(tmp_path / f"{n}_{name}", _corrupt(rng, data))
        try:
            load(path)
        except GapwatchError:
            pass


@pytest.mark.parametrize("fmt", [None, "deepspeed-csv"], ids=["detected", "named"])
def test_a_corrupted_deepspeed_csv_folder_ends_in_one_clear_error_or_an_import(tmp_path, fmt):
    data = _deepspeed_loss_csv()
    load(_deepspeed_job(tmp_path / "clean", data), fmt=fmt)  # the sample itself imports
    rng = random.Random("deepspeed-csv")
    for n in range(CASES_EACH):
        try:
            load(_deepspeed_job(tmp_path / str(n), _corrupt(rng, data)), fmt=fmt)
        except GapwatchError:
            pass


def _deepspeed_job(folder, loss: bytes):
    """A job folder whose train_loss file is `loss`, beside an intact lr file."""
    folder.mkdir()
    _write(folder / "Train_Samples_train_loss.csv", loss)
    _write(folder / "Train_Samples_lr.csv", b"step,lr\r\n64,0.0001\r\n128,0.0001\r\n")
    return folder


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_a_corrupted_dvclive_folder_ends_in_one_clear_error_or_an_import(tmp_path):
    data = "timestamp\tstep\tloss\n" + "".join(f"{1_700_000_000_000 + s}\t{s}\t{4 - s / 100}\n" for s in range(60))
    rng = random.Random("dvclive")
    for n in range(-1, CASES_EACH):
        metrics = tmp_path / str(n) / "dvclive" / "plots" / "metrics" / "train"
        metrics.mkdir(parents=True)
        _write(metrics / "loss.tsv", data.encode() if n < 0 else _corrupt(rng, data.encode()))
        try:
            load(tmp_path / str(n))
        except GapwatchError:
            assert n >= 0, "the sample itself imports"
