"""Writes real W&B offline runs with the wandb package, in a child process (wandb keeps global
state per process). Run as `python wandb_writer.py DIR KIND [STEPS]`:

* rich: every kind of value a reference run holds (floats, ints, NaN, +/-Inf, booleans, nested
  dicts, text, a value over 127 bytes, a histogram), explicit summary values and nested config;
* live: logs STEPS steps, creates DIR/ready, waits (at most 60 s) for DIR/go, logs STEPS more
  steps and finishes: a run that is still being written while a test reads it.
* hf: what Hugging Face Trainer's W&B callback logs with logging_steps=10, eval_steps=50:
  `train/loss`, `train/learning_rate`, `train/epoch` and `train/global_step` every 10 steps, an
  evaluation row (`eval/loss`, `eval/runtime`) every 50, and the final `train/train_*` row;
* lightning VAL_ON_STEP: lightning_fit's run through Lightning's WandbLogger;
* litgpt ACCUMULATION: litgpt_logging's run (40 optimizer steps) through Lightning's WandbLogger,
  as LitGPT logs to W&B;
* declared: a custom loop that accumulates 4 batches a step and declares its own step keys with
  `define_metric`: `train/*` against `optimizer_step` (4, 8, ...), logged every step, and `val/*`
  against `epoch`, logged in a row of its own every 20 steps;
* deepspeed: what DeepSpeed's engine logs through its W&B monitor, 32 samples a step: each of
  `Train/Samples/train_loss`, `Train/Samples/lr` with `wandb.log({name: value}, step=samples)`;
* segment ID FIRST LAST: one process of a resumed run (`resume="allow"`, run id ID) that logs
  `train/global_step` FIRST..LAST-1 with `train/loss` = 10 - step / 100 + FIRST / 1000 (so each
  segment's values differ) and finishes.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_ERROR_REPORTING="false",
                  WANDB_CONSOLE="off")

import wandb  # noqa: E402  (after the environment that keeps it offline and quiet)


def rich(root: Path, steps: int) -> None:
    run = wandb.init(project="gapwatch-test", name="rich-ref", dir=str(root),
                     config={"lr": 3e-4, "model": {"d_model": 128, "layers": 2},
                             "tokens_per_step": 4096})
    for step in range(steps):
        row = {"train/loss": 4.0 - step / steps, "train/grad_norm": 0.5, "optim/lr": 3e-4,
               "train/tokens": 4096 * (step + 1), "perf/steps": step}
        if step == 7:
            row["train/loss"] = math.nan
        if step == 8:
            row["train/grad_norm"] = math.inf
        if step == 9:
            row["train/grad_norm"] = -math.inf
        if step % 10 == 0:
            row["eval/heldout/c4/loss"] = 3.5 - step / (2 * steps)
            row["eval"] = {"nested": {"acc": 0.25 + step / (4 * steps)}}
            row["flags/is_best"] = step % 20 == 0
            row["notes/text"] = "checkpoint saved"
            row["notes/long"] = "x" * 300
            row["hist/weights"] = wandb.Histogram([1.0, 2.0, 2.5, 3.0])
        wandb.log(row, step=step)
    run.summary["final/best_loss"] = 1.25
    run.finish()


def live(root: Path, steps: int) -> None:
    run = wandb.init(project="gapwatch-test", name="live-ref", dir=str(root))
    for step in range(steps):
        wandb.log({"train/loss": 5.0 - step * 1e-3, "optim/lr": 1e-4}, step=step)
    (root / "ready").write_text(run.id)
    deadline = time.monotonic() + 60
    while not (root / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for step in range(steps, 2 * steps):
        wandb.log({"train/loss": 5.0 - step * 1e-3, "optim/lr": 1e-4}, step=step)
    run.finish()


def hf(root: Path, steps: int) -> None:
    run = wandb.init(project="gapwatch-test", name="hf-ref", dir=str(root))
    for step in range(10, steps + 1, 10):
        wandb.log({"train/loss": 3.0 - step / (2 * steps), "train/learning_rate": 1e-4,
                   "train/epoch": step / steps, "train/global_step": step})
        if step % 50 == 0:
            wandb.log({"eval/loss": 3.2 - step / (2 * steps), "eval/runtime": 1.5,
                       "train/epoch": step / steps, "train/global_step": step})
    wandb.log({"train/train_runtime": 100.0, "train/train_loss": 2.5, "train/total_flos": 1e15,
               "train/epoch": 1.0, "train/global_step": steps})
    run.finish()


def declared(root: Path, steps: int) -> None:
    run = wandb.init(project="gapwatch-test", name="declared-ref", dir=str(root))
    run.define_metric("optimizer_step")
    run.define_metric("train/*", step_metric="optimizer_step")
    run.define_metric("val/*", step_metric="epoch")
    for step in range(1, steps + 1):
        wandb.log({"optimizer_step": 4 * step, "train/loss": 4.0 - step / steps, "train/lr": 1e-3})
        if step % 20 == 0:
            wandb.log({"val/loss": 4.2 - step / steps, "epoch": step // 20})
    run.finish()


def deepspeed(root: Path, steps: int) -> None:
    run = wandb.init(project="gapwatch-test", name="deepspeed-ref", dir=str(root))
    for step in range(1, steps + 1):
        for name, value in (("Train/Samples/train_loss", 4.0 - step / steps), ("Train/Samples/lr", 1e-4)):
            wandb.log({name: value}, step=32 * step)
    run.finish()


def segment(root: Path, run_id: str, first: int, last: int) -> None:
    run = wandb.init(project="gapwatch-test", name="resumed-ref", id=run_id, resume="allow",
                     dir=str(root))
    for step in range(first, last):
        wandb.log({"train/global_step": step, "train/loss": 10 - step / 100 + first / 1000})
    run.finish()


def lightning(root: Path, val_on_step: int) -> None:
    from lightning.pytorch.loggers import WandbLogger

    from lightning_fit import fit

    fit([WandbLogger(project="gapwatch-test", name="lightning-ref", save_dir=str(root), offline=True)],
        bool(val_on_step))
    wandb.finish()


def litgpt(root: Path, accumulation: int) -> None:
    from lightning.pytorch.loggers import WandbLogger

    from litgpt_logging import log_run

    log_run([WandbLogger(project="gapwatch-test", name="litgpt-ref", save_dir=str(root), offline=True)],
            accumulation, 40)
    wandb.finish()


if __name__ == "__main__":
    out, kind = Path(sys.argv[1]), sys.argv[2]
    if kind == "segment":
        segment(out, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 60
        {"rich": rich, "live": live, "hf": hf, "lightning": lightning, "declared": declared,
         "deepspeed": deepspeed, "litgpt": litgpt}[kind](out, n)
