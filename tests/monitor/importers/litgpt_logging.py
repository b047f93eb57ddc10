"""What LitGPT's `pretrain.py` logs, through the Lightning loggers it logs with: one row every
optimizer step of `loss` (the step's micro-batch mean), `iter`, `step` (the optimizer step),
`iter_time`, `tokens` (one device's), `total_tokens`, `learning_rate` and Lightning's
ThroughputMonitor values, numbered by the logger as LitGPT numbers them, `iter - 1`; every 10
optimizer steps a row of `val_loss` and `val_ppl` at the same logger step. The recipe's loss
depends on the optimizer step only, so two runs with different gradient accumulation (the same
global batch on different device counts) log the same losses at different logger steps."""

from __future__ import annotations

import math

VAL_EVERY = 10
MICRO_BATCH_TOKENS = 4 * 128


def train_loss(step: int) -> float:
    return 10.0 * step ** -0.3


def val_loss(step: int) -> float:
    return 10.5 * step ** -0.3


def log_run(loggers, accumulation: int, steps: int) -> None:
    for logger in loggers:
        logger.log_hyperparams({"model_name": "pythia-14m",
                                "train": {"global_batch_size": 16, "log_interval": 1}})
    for step in range(1, steps + 1):
        iteration = step * accumulation
        row = {"loss": train_loss(step), "iter": iteration, "step": step, "epoch": 0,
               "iter_time": 0.05, "remaining_time": 100.0 - step,
               "tokens": iteration * MICRO_BATCH_TOKENS, "total_tokens": iteration * MICRO_BATCH_TOKENS,
               "learning_rate": 1e-3, "time": 0.05 * iteration, "batches": iteration,
               "samples": 4 * iteration, "lengths": iteration * MICRO_BATCH_TOKENS,
               "device/batches_per_sec": 20.0, "device/samples_per_sec": 80.0,
               "device/items_per_sec": 10240.0, "device/flops_per_sec": 2e12, "device/mfu": 0.25}
        for logger in loggers:
            logger.log_metrics(row, step=iteration - 1)
        if step % VAL_EVERY == 0:
            for logger in loggers:
                logger.log_metrics({"val_loss": val_loss(step), "val_ppl": math.exp(val_loss(step))},
                                   step=iteration - 1)
    for logger in loggers:
        logger.finalize("success")
