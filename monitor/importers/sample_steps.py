"""DeepSpeed's monitor numbers its series by samples seen: placed on optimizer steps.

With a monitor on in its config (`tensorboard`, `wandb`), DeepSpeed's engine writes
`Train/Samples/train_loss`, `Train/Samples/lr`, `Train/Samples/loss_scale` (and, with
wall_clock_breakdown, `Train/Samples/elapsed_time_ms_*`) at `global_samples`, the samples consumed
so far, once every optimizer step. Read as steps, a run of 64 samples a step is at "step" 6,400
after 100 steps and pairs with nothing another trainer logged at its step 100. Each such series is
placed at samples / (samples a step): the one spacing between consecutive values of every one of
them (a run resumed from a checkpoint goes on at the same spacing). Where the spacing varies (a
batch size that ramps up), or a value falls between two steps, they keep their samples, and a note
says so.
"""

from __future__ import annotations

import numpy as np

from .imported_run import ImportedRun

SAMPLES = "Train/Samples/"


def on_steps(run: ImportedRun) -> ImportedRun:
    """`run` with its `Train/Samples/` series on optimizer steps (see the module docstring)."""
    scalars = run.scalars
    mine = scalars["key"].astype(str).str.startswith(SAMPLES).to_numpy()
    if not mine.any():
        return run
    rows = scalars.loc[mine, ["key", "attempt", "step"]]
    gaps = set()
    for _, group in rows.groupby(["key", "attempt"], observed=True, sort=False):
        gaps.update(np.diff(np.unique(group["step"].to_numpy())).tolist())
    per_step = gaps.pop() if len(gaps) == 1 else None
    if per_step is None or (rows["step"].to_numpy() % per_step).any():
        why = "their samples grow by different numbers between values" if per_step is None and gaps else (
            "one value was logged" if per_step is None else "some fall between two steps")
        run.notes.append(f"{run.source}: {SAMPLES}* (DeepSpeed's monitor) are numbered by samples seen, and are "
                         f"left so: {why}")
        return run
    steps = scalars["step"].to_numpy().copy()
    steps[mine] //= per_step
    run.scalars = scalars.assign(step=steps)
    if mine.all():  # every series, so its restarts too, were on samples
        for event in run.events:
            event["step"] = int(event["step"]) // per_step
    run.notes.append(f"{run.source}: {SAMPLES}* (DeepSpeed's monitor) are numbered by samples seen: placed on "
                     f"optimizer steps at {per_step:,} samples a step")
    return run
