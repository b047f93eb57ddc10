"""Keras's TensorBoard callback, placed on optimizer steps.

The callback (Keras 3, and tf.keras before it) writes `train/` and `validation/` event folders
whose series are numbered three ways:
* `epoch_<metric>` by epoch, from 0 (the training and held-out means, the learning rate);
* `evaluation_<metric>_vs_iterations` (validation/, after each validated epoch) by optimizer step;
* `batch_<metric>` (update_freq="batch" or N) by batch, counted from the start of the `fit()`
  call that logged it; each value is the mean over the epoch so far, since Keras resets its
  metrics at each epoch.

Read as numbered, the held-out loss sat at steps 0-3 beside a training loss at steps 1-80, and a
fit() resumed from a checkpoint (`initial_epoch`) counted its batches from 1 again, read as a
restart that overwrote the first fit's steps. Here every series goes onto the optimizer's steps:
with S steps an epoch, epoch e ends at step (e + 1) * S, and a fit() that began at epoch e0
began at step e0 * S. Each batch value becomes the mean since the value before it in its epoch
(n * mean_n - m * mean_m) / (n - m), as a trainer that logs the loss every N steps logs it (the
batches of an epoch are weighted alike: a smaller last batch weighs a little less in Keras).
An evaluation is the same number as the `epoch_` value Keras writes after it, at the epoch's
last step: it is kept only where it repeats none.

S comes from the evaluations (optimizer step over epochs done), else from where the batches of
each epoch stop. A run for which neither tells it (no evaluation, logged every N batches with N
not pinning it) keeps the numbering it was written with, with a note saying why.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

Record = tuple[int, str, float | None, float]
"""(step, tag, value or None for a summary that is not a scalar, wall time), as read."""

EPOCH, BATCH = "epoch_", "batch_"
_EVALUATION = re.compile(r"evaluation_(.+)_vs_iterations")
_KERAS_TAG = re.compile(rf"({EPOCH}|{BATCH}).+|{_EVALUATION.pattern}")
SPLITS = ("train", "validation")  # the subfolders it writes
# Batch series that are the batch's own value, not a running mean over the epoch.
_PER_BATCH = {"batch_steps_per_second"}


def is_keras(folder_records: dict[Path, list[Record]], declared: set[str]) -> bool:
    """Whether the event files of one launch's train/ and validation/ subfolders are the Keras
    callback's: every scalar named as the callback names them, some by epoch."""
    tags = {t for records in folder_records.values() for _, t, v, _ in records if v is not None and t not in declared}
    return any(t.startswith(EPOCH) for t in tags) and all(_KERAS_TAG.fullmatch(t) for t in tags)


def place(folder_records: dict[Path, list[Record]], where: str) -> tuple[dict[Path, list[Record]], str]:
    """The records of one Keras launch (event file -> its records, in the order written) on
    optimizer steps, and a note saying how they were placed (or why they could not be)."""
    anchors = _anchors(folder_records)
    per_epoch = _steps_per_epoch(folder_records, anchors)
    if per_epoch is None:
        numbered = any(_EVALUATION.fullmatch(t) or t.startswith(BATCH)
                       for records in folder_records.values() for _, t, _, _ in records)
        why = ("its optimizer steps do not grow by the same number each epoch" if anchors
               else "it logged no evaluation and its batches do not pin the steps of an epoch")
        return folder_records, (f"{where}: Keras's TensorBoard callback: left as numbered (epochs; batches from the "
                                f"start of each fit() call), since {why}" if numbered else
                                f"{where}: Keras's TensorBoard callback: every series is numbered by epoch "
                                f"(nothing was logged by optimizer step)")
    placed: dict[Path, list[Record]] = {}
    last_epoch = -1
    for file, records in folder_records.items():
        epochs = [s for s, t, v, _ in records if t.startswith(EPOCH) and v is not None]
        started = epochs[0] * per_epoch if epochs else (last_epoch + 1) * per_epoch
        last_epoch = max(epochs, default=last_epoch)
        placed[file] = list(_placed(records, per_epoch, started, anchors.get(file, {})))
    said = ["epoch_* at the last step of their epoch"]
    if any(t.startswith(BATCH) for records in folder_records.values() for _, t, _, _ in records):
        said.append("batch_* from the first step of their fit() call, each the mean since the value before "
                    "it (Keras logged the mean over the epoch so far)")
    if anchors:
        said.append("evaluation_*_vs_iterations left out where they repeat validation/epoch_*")
    return placed, f"{where}: Keras's TensorBoard callback: placed on optimizer steps, {per_epoch:,} an epoch: " + (
        "; ".join(said))


def _placed(records: list[Record], per_epoch: int, started: int, repeats: dict[int, tuple[int, int]]):
    before: dict[str, tuple[int, int, float]] = {}  # tag -> (epoch, steps into it, mean over them)
    for index, (step, tag, value, wall) in enumerate(records):
        if tag.startswith(EPOCH):
            yield (step + 1) * per_epoch, tag, value, wall
        elif tag.startswith(BATCH):
            at = started + step
            if value is None or tag in _PER_BATCH:
                yield at, tag, value, wall
                continue
            epoch = (at - 1) // per_epoch
            into = at - epoch * per_epoch  # 1 .. per_epoch
            was, done, mean = before.get(tag, (epoch, 0, 0.0))
            if was != epoch:  # Keras's means start again with each epoch
                done, mean = 0, 0.0
            before[tag] = (epoch, into, value)
            yield at, tag, (into * value - done * mean) / (into - done), wall
        elif index not in repeats:
            yield step, tag, value, wall


def _anchors(folder_records: dict[Path, list[Record]]) -> dict[Path, dict[int, tuple[int, int]]]:
    """file -> {position of an evaluation record: (epoch, optimizer step)}, for each evaluation
    that the validation file's next `epoch_` record of the same metric repeats."""
    found: dict[Path, dict[int, tuple[int, int]]] = defaultdict(dict)
    for file, records in folder_records.items():
        waiting: dict[str, tuple[int, int]] = {}  # metric -> (position, optimizer step)
        for index, (step, tag, value, _) in enumerate(records):
            evaluation = _EVALUATION.fullmatch(tag)
            if evaluation and value is not None:
                waiting[evaluation.group(1)] = (index, step)
            elif tag.startswith(EPOCH) and tag[len(EPOCH):] in waiting:
                position, at = waiting.pop(tag[len(EPOCH):])
                found[file][position] = (step, at)
    return found


def _steps_per_epoch(folder_records: dict[Path, list[Record]], anchors) -> int | None:
    """Optimizer steps an epoch: every evaluation's step over the epochs done, when they agree;
    else the one whole number that the batches logged before and after each epoch's end allow."""
    if anchors:
        ratios = {at / (epoch + 1) for pairs in anchors.values() for epoch, at in pairs.values()}
        ratio = ratios.pop() if len(ratios) == 1 else math.nan
        return int(ratio) if ratio >= 1 and ratio.is_integer() else None
    least, most = 1, math.inf
    for records in folder_records.values():  # one fit() call each: its batches count from 1
        first = None  # the first epoch this call logged
        last_batch = 0
        done = 0  # epochs this call had logged
        for step, tag, value, _ in records:
            if value is None:
                continue
            if tag.startswith(BATCH):
                if done and step > last_batch:  # after the end of `done` epochs: step > done * S
                    most = min(most, (step - 1) // done)
                last_batch = max(last_batch, step)
            elif tag.startswith(EPOCH):
                first = step if first is None else first
                if step - first + 1 > done:  # the end of an epoch: every batch before it, step <= done * S
                    done = step - first + 1
                    least = max(least, math.ceil(last_batch / done))
    return int(least) if least == most else None
