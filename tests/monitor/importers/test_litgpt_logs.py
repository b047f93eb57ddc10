"""LitGPT's logs, read as someone else's reference run (litgpt_logging.py says what it logs).

LitGPT's loggers number rows by micro-batch iteration (`iter - 1`) and it logs its optimizer step
as `step`. Two runs of one recipe with different gradient accumulation (the same global batch on
4 or 2 devices) must land on the same optimizer steps: read on the logger's numbering, one run
would sit at twice the steps of the other."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from lightning.fabric.loggers import TensorBoardLogger

from app.cli import main
from monitor import schema
from monitor.importers import load

from .conftest import offline_run_dir, run_writer
from .litgpt_logging import VAL_EVERY, log_run, train_loss, val_loss

STEPS = 40  # wandb_writer's litgpt runs log 40 optimizer steps too


@pytest.fixture(scope="module", params=[4, 2], ids=["4 micro-batches a step", "2 micro-batches a step"])
def litgpt_logs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("litgpt")
    log_run([TensorBoardLogger(root, name="tb")], request.param, STEPS)
    run_writer(root, "litgpt", request.param)  # WandbLogger, in a process of its own
    return root, request.param


def _series(run, key: str) -> pd.Series:
    s = run.scalars.loc[run.scalars["key"] == key]
    return pd.Series(s["value"].to_numpy(), index=s["step"].to_numpy())


@pytest.mark.slow
@pytest.mark.parametrize("source", ["tensorboard", "wandb"])
def test_litgpt_runs_land_on_the_optimizer_step(litgpt_logs, source):
    root, accumulation = litgpt_logs
    path = offline_run_dir(root) if source == "wandb" else next(root.rglob("events.out.tfevents.*")).parent
    run = load(path)
    assert run.profile == "litgpt"
    steps = list(range(1, STEPS + 1))
    train = _series(run, schema.TRAIN_LOSS)
    assert train.index.tolist() == steps, f"not on the optimizer step ({accumulation} micro-batches a step)"
    assert train.tolist() == pytest.approx([train_loss(s) for s in steps])
    heldout = _series(run, schema.heldout_key("val"))
    assert heldout.index.tolist() == steps[VAL_EVERY - 1::VAL_EVERY]
    assert heldout.tolist() == pytest.approx([val_loss(s) for s in heldout.index])
    assert any("step axis: step" in n for n in run.notes)
    assert run.attempts == 1 and not [e for e in run.events if e["kind"] == "restart"]


def test_litgpt_values_mean_what_litgpt_means(litgpt_logs):
    root, accumulation = litgpt_logs
    run = load(offline_run_dir(root))
    # Every device's tokens, not one device's; Lightning's MFU is a fraction already.
    assert run.key_map["total_tokens"] == schema.TRAIN_TOKENS
    assert run.key_map["tokens"] != schema.TRAIN_TOKENS
    assert _series(run, schema.PERF_MFU).tolist() == pytest.approx([0.25] * STEPS)
    assert run.key_map["device/items_per_sec"] == schema.PERF_DEVICE_TOKENS_PER_S
    # The last micro-batch's time is not the step's.
    assert run.key_map["iter_time"] != schema.PERF_STEP_TIME_S
    # The logger's own copy of its numbering is not kept; val_ppl is exp(val_loss).
    assert "trainer/global_step" not in run.key_map and "val_ppl" not in run.key_map
    assert _series(run, "train/micro_batches").tolist() == [s * accumulation for s in range(1, STEPS + 1)]


def test_a_logger_step_without_iter_time_stays_as_declared(tmp_path):
    """A run that logs a `step` value of its own but none of LitGPT's names keeps the axis its
    logger gives it: only LitGPT's marker makes `step` the optimizer step."""
    logger = TensorBoardLogger(tmp_path, name="tb")
    for n in range(1, 11):
        logger.log_metrics({"train_loss": 3.0 - n / 10, "step": n // 2}, step=n)
    logger.finalize("success")
    run = load(next(tmp_path.rglob("events.out.tfevents.*")).parent)
    assert run.profile != "litgpt"
    assert _series(run, schema.TRAIN_LOSS).index.tolist() == list(range(1, 11))


def _recipe_run(root, accumulation: int, seed: int, heldout_shift: float = 0.0):
    """3,000 optimizer steps of one recipe's TensorBoard log as LitGPT writes it: the same global
    batch in `accumulation` micro-batches, a seed's own offset and noise; held-out every 100."""
    rng = np.random.default_rng(seed)
    logger = TensorBoardLogger(root, name="tb")
    offset = rng.normal(0, 0.003)
    for step in range(1, 3_001):
        curve = 8.0 * (step + 20) ** -0.45 + offset
        iteration = step * accumulation
        logger.log_metrics({"loss": 2.5 + curve + rng.normal(0, 0.03), "iter": iteration, "step": step,
                            "iter_time": 0.2, "learning_rate": 3e-4}, step=iteration - 1)
        if step % 100 == 0:
            heldout = 2.6 + curve + heldout_shift + rng.normal(0, 0.005)
            logger.log_metrics({"val_loss": heldout, "val_ppl": math.exp(heldout)}, step=iteration - 1)
    logger.finalize("success")
    return next(root.rglob("events.out.tfevents.*")).parent


@pytest.mark.parametrize("heldout_shift", [0.0, 0.1], ids=["one recipe", "held-out worse"])
def test_a_pair_that_accumulates_differently_is_judged_on_its_steps(tmp_path, sqlite_url, capsys,
                                                                     heldout_shift):
    """The same recipe on 8 and 4 devices (2 and 4 micro-batches a step): read on the loggers'
    numbering, the reference stopped half way and `detect` called the run's held-out loss diverged
    (a critical). On the optimizer step the pair ties; a run whose held-out loss is 0.1 worse is
    still told."""
    reference = _recipe_run(tmp_path / "ref", 2, seed=1)
    run = _recipe_run(tmp_path / "run", 4, seed=2, heldout_shift=heldout_shift)
    assert main(["import", str(run), "--run", "run", "--store", sqlite_url]) == 0
    assert main(["import", str(reference), "--run", "ref", "--reference-of", "run", "--store", sqlite_url]) == 0
    capsys.readouterr()
    assert main(["detect", "--run", "run", "--store", sqlite_url, "--no-write", "--json"]) == 0
    out = capsys.readouterr()
    assert "against ref" in out.err  # judged against its reference, not alone
    found = json.loads(out.out)
    if heldout_shift:
        assert any(r["detector"] == "heldout_divergence" for r in found)
    else:
        assert found == []
