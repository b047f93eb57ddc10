"""Pax's TensorBoard folders (summaries/train/, eval_train/, eval_test_<input>/), written with
torch's SummaryWriter under the tags paxml's summary_utils writes: `loss`, `Steps/sec`,
`Metrics/<name>` and `Metrics/<name>-weight`, and the learner's `learning/lr_scalar`."""

from __future__ import annotations

import math

import pytest
from torch.utils.tensorboard import SummaryWriter

from monitor import schema
from monitor.importers import load

STEPS = range(100, 2001, 100)
EVALS = range(500, 2001, 500)


def xent(step: int) -> float:
    return 2.4 + 3 / math.sqrt(step)


def _metrics(writer, step: int, mean: float, tokens: float) -> None:
    for name, value in {"avg_xent": mean, "log_pplx": mean, "total_loss": mean + 0.01, "aux_loss": 0.01,
                        "fraction_of_correct_next_step_preds": 0.42, "num_predictions": tokens}.items():
        writer.add_scalar(f"Metrics/{name}", value, step)
        writer.add_scalar(f"Metrics/{name}-weight", tokens, step)
    writer.add_scalar("loss", mean + 0.01, step)


@pytest.mark.parametrize("suffix", ["_scalar", "_aggregate_scalar"])
def test_a_pax_job_reads_its_cross_entropy_as_the_training_and_held_out_loss(tmp_path, suffix):
    summaries = tmp_path / "job" / "summaries"
    train, on_train = SummaryWriter(str(summaries / "train")), SummaryWriter(str(summaries / "eval_train"))
    heldout = SummaryWriter(str(summaries / "eval_test_C4Validation"))
    train.add_text("Total Num Params", "1 000 000", 0)
    for step in STEPS:
        _metrics(train, step, xent(step), 65536.0)
        train.add_scalar("Steps/sec", 1.5, step)
        train.add_scalar(f"lr{suffix}", 1e-3, step)
        train.add_scalar(f"learning/lr{suffix}", 1e-3, step)
        if step in EVALS:
            _metrics(on_train, step, xent(step) - 0.01, 8192.0)
            _metrics(heldout, step, xent(step) + 0.05, 8192.0)
    for writer in (train, on_train, heldout):
        writer.close()
    run = load(tmp_path / "job")
    assert run.profile == "pax"
    data = run.to_run_data("pax")
    assert data.series(schema.TRAIN_LOSS).to_dict() == {s: pytest.approx(xent(s)) for s in STEPS}
    assert [k for k in data.scalars.columns if k.startswith(schema.HELDOUT_PREFIX)] == [
        "eval/heldout/c4validation/loss"]
    assert data.series("eval/heldout/c4validation/loss").to_dict() == {
        s: pytest.approx(xent(s) + 0.05) for s in EVALS}
    assert data.series(schema.OPTIM_LR).iloc[-1] == pytest.approx(1e-3)
    assert "perf/steps_per_s" in data.scalars and "train/total_loss" in data.scalars
    # The training data evaluated is no held-out set; weights and the repeated values are left out.
    assert "validation/train/avg_xent" in data.scalars
    assert not any(k.endswith("_weight") or "log_pplx" in k for k in data.scalars.columns)
