"""What a run leaves behind: checkpoints that evals can load, and a W&B offline run."""

import jax
import numpy as np
import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load as import_run
from tests.trainer.conftest import TEST_STEPS
from trainer.checkpoint import load_for_eval
from trainer.model import forward, init_params
from trainer.step import next_token_loss, reread_split


@pytest.mark.slow
def test_checkpoint_loads_for_evaluation(clean_run):
    config, result, tmp = clean_run.config, clean_run.result, clean_run.tmp
    latest = load_for_eval(tmp / "clean")  # a run directory: the latest step
    assert latest.step == TEST_STEPS and latest.config == config.model
    assert latest.meta["tokens"] == TEST_STEPS * config.tokens_per_step
    early = load_for_eval(result.checkpoint_dir / "10")  # one step folder
    assert early.step == 10
    text = "def add(a, b):\n    return a + b\n" * 8
    tokens = np.asarray([latest.tokenizer.encode(text)[: config.model.max_seq_len + 1]], np.int32)
    fresh = init_params(config.model, jax.random.key(0))
    loss = jax.jit(next_token_loss, static_argnames="model")
    losses = [float(loss(p, tokens, model=config.model)[0]) for p in (fresh, early.params, latest.params)]
    assert max(losses[1:]) < losses[0]  # trained weights, not a fresh init
    assert not np.array_equal(early.params["lm_head"]["weight"], latest.params["lm_head"]["weight"])
    assert forward(latest.params, tokens[:, :-1], config.model).shape == (1, tokens.shape[1] - 1, 512)


def test_bad_checkpoint_paths_are_one_clear_error(tmp_path):
    with pytest.raises(GapwatchError, match="does not exist"):
        load_for_eval(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GapwatchError, match="no finished checkpoint"):
        load_for_eval(tmp_path / "empty")


def test_wandb_offline_run_holds_the_same_metrics(clean_run):
    data, tmp = clean_run.data, clean_run.tmp
    folders = list((tmp / "clean" / "wandb").glob("offline-run-*"))
    assert len(folders) == 1
    imported = import_run(folders[0]).to_run_data("wandb-copy")
    for key in (schema.TRAIN_LOSS, schema.OPTIM_LR, schema.DATA_UNIQUE_FRACTION):
        ours, theirs = data.series(key), imported.series(key)
        assert list(theirs.index) == list(ours.index) == list(range(1, TEST_STEPS + 1))
        np.testing.assert_allclose(theirs.to_numpy(), ours.to_numpy(), rtol=1e-6)


def test_reread_split_compares_first_reads_with_rereads_of_one_batch():
    per_record = np.array([3.0, 2.0, 4.0, 1.0], np.float32)
    fraction, gap = reread_split(per_record, np.array([False, True, False, True]))
    assert float(fraction) == 0.5 and float(gap) == (3.0 + 4.0) / 2 - (2.0 + 1.0) / 2
    for kind in (False, True):  # one kind only: nothing to compare
        fraction, gap = reread_split(per_record, np.full(4, kind))
        assert float(fraction) == float(kind) and float(gap) == 0.0
