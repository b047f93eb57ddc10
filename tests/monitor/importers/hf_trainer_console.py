"""A real Hugging Face Trainer run whose console the importer tests read: `python
hf_trainer_console.py OUT_DIR [--no-bar]` trains a one-layer GPT-2 on random tokens for 60 steps
on CPU (a dict logged every 5 steps, an evaluation every 20), printing what the Trainer prints; the
steps and logs its callbacks saw are written to OUT_DIR/logged.json, the truth to read it against.
Run it with stdout and stderr sent to one file, as `python train.py > train.log 2>&1` keeps them.

Beside them, OUT_DIR/logging.jsonl is what ms-swift, which runs this Trainer, appends at each log
(its callback's `on_log` and `append_to_jsonl`; ms-swift itself is not installed here): the log
with its trainer's memory and mean speed, and the progress as text. And OUT_DIR/mlflow.db is what
the Trainer's own MLflow callback (`report_to="mlflow"`) tracks into MLflow's database store."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.x = torch.randint(0, 64, (n, 16))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Recorder(TrainerCallback):
    def __init__(self) -> None:
        self.logged: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logged.append({"step": state.global_step, "logs": dict(logs or {})})


class SwiftLog(TrainerCallback):
    """ms-swift's logging.jsonl: each log rounded to 8 digits, with `global_step/max_steps`,
    `percentage`, `elapsed_time` and `remaining_time` as its callback adds them, and the
    `memory(GiB)` and `train_speed(iter/s)` its trainer adds to training logs."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        elapsed = max(time.time() - self.start, 1e-6)
        if "loss" in logs:
            logs["memory(GiB)"] = 0.0
            logs["train_speed(iter/s)"] = round(state.global_step / elapsed, 6)
        logs["global_step/max_steps"] = f"{state.global_step}/{state.max_steps}"
        done = state.global_step / state.max_steps
        logs["percentage"] = f"{done * 100:.2f}%"
        logs["elapsed_time"] = f"{int(elapsed)}s"
        logs["remaining_time"] = f"{int(elapsed / done - elapsed)}s"
        logs = {k: round(v, 8) if isinstance(v, float) else v for k, v in logs.items()}
        with open(Path(args.output_dir) / "logging.jsonl", "a", encoding="utf-8") as f:
            f.write(f"{json.dumps(logs, ensure_ascii=False)}\n")


def main(out: Path, bar: bool) -> None:
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{out / 'mlflow.db'}"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, bos_token_id=0, eos_token_id=0, n_positions=16, n_embd=16,
                                       n_layer=1, n_head=2))
    args = TrainingArguments(output_dir=str(out), max_steps=60, logging_steps=5, eval_strategy="steps",
                             eval_steps=20, per_device_train_batch_size=4, learning_rate=1e-3, report_to=["mlflow"], run_name="tiny-gpt2",
                             save_strategy="no", use_cpu=True, disable_tqdm=not bar)
    recorder = Recorder()
    Trainer(model=model, args=args, train_dataset=Tokens(400), eval_dataset=Tokens(40),
            callbacks=[recorder, SwiftLog()]).train()
    (out / "logged.json").write_text(json.dumps(recorder.logged))


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--no-bar" not in sys.argv)
