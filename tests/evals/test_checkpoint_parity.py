"""Parity (b) and (c) on real checkpoints of our trainer: bitwise equal logits across a save and
restore and across a change of device count on CPU; two runs compared at equal tokens and stored."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evals.parity import compare_logits

from checkpoint_worker import run_worker


@pytest.mark.slow
def test_logits_survive_save_and_restore_bitwise(runs, tmp_path):
    import functools

    import jax
    import orbax.checkpoint as ocp

    from app.commands.parity import token_rows
    from trainer import checkpoint
    from trainer.checkpoint import load_for_eval
    from trainer.model import forward

    before = load_for_eval(runs / "a/checkpoints/4")
    mngr = checkpoint.manager(tmp_path / "copy")
    mngr.save(4, args=ocp.args.Composite(
        params=ocp.args.StandardSave(before.params), train=ocp.args.StandardSave({"step": 4}),
        data=ocp.args.JsonSave({}), meta=ocp.args.JsonSave(before.meta),
        tokenizer=ocp.args.JsonSave(json.loads(before.tokenizer.to_json()))))
    mngr.wait_until_finished()
    mngr.close()
    after = load_for_eval(tmp_path / "copy")
    tokens = token_rows(before.tokenizer, 4, before.config.max_seq_len, None)
    fn = jax.jit(functools.partial(forward, config=before.config))
    a, b = np.asarray(fn(before.params, tokens)), np.asarray(fn(after.params, tokens))
    assert np.array_equal(a, b)
    report = compare_logits(a, b)
    assert report.kl_max == 0.0 and report.top1 == 1.0


def test_logits_do_not_depend_on_device_count(runs, tmp_path):
    from app.commands.parity import token_rows
    from trainer.checkpoint import load_for_eval

    ckpt = runs / "a/checkpoints/4"
    model = load_for_eval(ckpt)
    np.save(tmp_path / "tokens.npy", token_rows(model.tokenizer, 8, model.config.max_seq_len, None))
    outputs = {}
    for devices in (1, 8):
        out = tmp_path / f"logits{devices}.npy"
        printed = run_worker("logits", str(ckpt), str(tmp_path / "tokens.npy"), str(out),
                         devices=devices, env_dir=tmp_path)
        assert f"devices={devices}" in printed
        outputs[devices] = np.load(out)
    assert np.array_equal(outputs[1], outputs[8])
    assert compare_logits(outputs[1], outputs[8]).kl_max == 0.0


def test_batch_shape_moves_only_the_last_bits(runs):
    """What does change the logits on CPU is the batch *shape* (matmul blocking): a measured
    float32-rounding-sized difference, which is why the test above fixes the per-device shape."""
    import functools

    import jax

    from app.commands.parity import token_rows
    from trainer.checkpoint import load_for_eval
    from trainer.model import forward

    model = load_for_eval(runs / "a/checkpoints/4")
    tokens = token_rows(model.tokenizer, 8, model.config.max_seq_len, None)
    fn = jax.jit(functools.partial(forward, config=model.config))
    whole = np.asarray(fn(model.params, tokens))
    rows = np.concatenate([np.asarray(fn(model.params, tokens[i:i + 1])) for i in range(8)])
    report = compare_logits(whole, rows)
    assert report.max_abs_logit_diff < 1e-5 and report.kl_max < 1e-9 and report.top1 == 1.0


def test_two_runs_at_equal_tokens_are_compared_and_stored(runs, tmp_path, capsys):
    from app.cli import main
    from monitor.store import open_store

    store = f"sqlite:///{tmp_path / 'parity.db'}"
    code = main(["parity", str(runs / "a/checkpoints/4"), str(runs / "b/checkpoints/4"),
                 "--run", "a", "--store", store, "--rows", "2", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["a"]["tokens"] == result["b"]["tokens"] == 4 * 8 * 64
    report = result["report"]
    assert report["kl_mean"] > 0 and 0 <= report["top1"] < 1  # different seeds: different models
    with open_store(store) as s:
        frame = s.read_scalars(["a"], ["parity/kl_mean", "parity/top1"])
    stored = dict(zip(frame["key"], frame["value"]))
    assert set(frame["step"]) == {4}
    assert stored["parity/kl_mean"] == pytest.approx(report["kl_mean"])
    assert stored["parity/top1"] == pytest.approx(report["top1"])


def test_unequal_tokens_are_refused_for_tracking(runs, tmp_path, capsys):
    from app.cli import main

    code = main(["parity", str(runs / "a/checkpoints/2"), str(runs / "b/checkpoints/4"),
                 "--run", "a", "--store", f"sqlite:///{tmp_path / 'p.db'}", "--rows", "1"])
    assert code == 2
    assert "different token counts" in capsys.readouterr().err


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    from app.cli import main

    assert main(["parity", str(tmp_path / "nope"), str(tmp_path / "nope2")]) == 2
    assert "does not exist" in capsys.readouterr().err
