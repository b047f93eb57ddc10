"""Parity measures against hand computations; the HF comparison passes in fp32 and catches a bug."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evals.parity import (ParityAccumulator, compare_logits, compare_logits_fns,
                          FP32_MAX_KL_MEAN, REPRODUCTION_BF16)
from monitor.errors import GapwatchError


def test_identical_logits_are_perfect():
    logits = np.random.default_rng(0).normal(size=(2, 5, 11)).astype(np.float32)
    report = compare_logits(logits, logits.copy())
    assert (report.kl_mean, report.kl_max, report.max_abs_logit_diff) == (0.0, 0.0, 0.0)
    assert report.top1 == 1.0 and report.topk_overlap == 1.0 and report.n_tokens == 10


def test_kl_top1_and_overlap_by_hand():
    p = np.log(np.array([0.7, 0.2, 0.1]))
    q = np.log(np.array([0.2, 0.7, 0.1]))
    report = compare_logits(np.stack([p, p])[None], np.stack([p, q])[None], top_k=2)
    kl = 0.7 * math.log(0.7 / 0.2) + 0.2 * math.log(0.2 / 0.7)
    assert report.kl_mean == pytest.approx(kl / 2)
    assert report.kl_max == pytest.approx(kl)
    assert report.top1 == 0.5
    assert report.topk_overlap == 1.0  # {0, 1} both times
    assert report.max_abs_logit_diff == pytest.approx(math.log(0.7 / 0.2))
    assert (report.worst[0].row, report.worst[0].position) == (0, 1)
    assert (report.worst[0].reference_top1, report.worst[0].candidate_top1) == (0, 1)


def test_batches_add_up_to_the_whole_and_mask_drops_positions():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 6, 9))
    b = a + 0.1 * rng.normal(size=a.shape)
    whole = compare_logits(a, b, n_worst=3)
    acc = ParityAccumulator(n_worst=3)
    acc.add(a[:1], b[:1])
    acc.add(a[1:], b[1:])
    parts = acc.report()
    assert parts.kl_mean == pytest.approx(whole.kl_mean) and parts.top1 == whole.top1
    assert parts.worst == whole.worst
    mask = np.zeros((4, 6), bool)
    mask[2, 3] = True
    only = compare_logits(a, b, mask=mask)
    assert only.n_tokens == 1 and only.worst[0].row == 2 and only.worst[0].position == 3


def test_bad_inputs_are_clear_errors():
    x = np.zeros((1, 2, 3))
    with pytest.raises(GapwatchError, match="shapes differ"):
        compare_logits(x, np.zeros((1, 2, 4)))
    with pytest.raises(GapwatchError, match="NaN"):
        compare_logits(x, np.full_like(x, np.nan))
    with pytest.raises(GapwatchError, match="non-empty"):
        compare_logits_fns(lambda t: t, lambda t: t, np.zeros((0,), np.int32))


def test_reference_figures_are_the_reproductions():
    assert (REPRODUCTION_BF16.kl_mean, REPRODUCTION_BF16.top1, REPRODUCTION_BF16.n_tokens) == (
        1.5e-3, 0.9875, 8192)


# --- against Hugging Face transformers (torch CPU) -------------------------------------------------
SMALL = dict(rows=2, seq_len=256, sliding_window=64)


def test_hf_parity_fp32_passes_and_bf16_is_measured(shared_data):
    from app.commands.parity import HFParitySetup, hf_parity

    text = shared_data / "text/wikitext-2/valid.txt"
    fp32, _ = hf_parity("float32", HFParitySetup(**SMALL), text=text)
    assert fp32.passes_fp32() and fp32.kl_mean < FP32_MAX_KL_MEAN and fp32.top1 >= 0.999
    assert fp32.n_tokens == 2 * 256
    bf16, _ = hf_parity("bfloat16", HFParitySetup(**SMALL), text=text)
    # bfloat16 keeps 8 bits of mantissa: clearly worse than fp32, still the same model.
    assert fp32.kl_mean * 100 < bf16.kl_mean < 1e-2
    assert bf16.top1 > 0.9


def test_hf_parity_catches_a_conversion_bug(shared_data):
    """A converter that drops the QK-norm scales (a plausible bug) must fail the fp32 bar."""
    import functools

    import jax
    import torch
    from transformers import Olmo3Config, Olmo3ForCausalLM

    from app.commands.parity import token_rows
    from evals.tokenizer import ByteTokenizer
    from trainer.convert_hf import params_from_hf
    from trainer.model import ModelConfig, forward

    config = ModelConfig(vocab_size=300, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2,
                         head_dim=16, mlp_hidden=96, max_seq_len=256, sliding_window=32)
    torch.manual_seed(0)
    hf = Olmo3ForCausalLM(Olmo3Config(**config.to_hf_dict()))
    with torch.no_grad():
        for p in hf.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn_like(p))
    hf.eval()
    params = params_from_hf(hf.state_dict(), config)
    for layer in params["model"]["layers"].values():
        layer["self_attn"]["q_norm"]["weight"] = np.ones_like(layer["self_attn"]["q_norm"]["weight"])
    ours = jax.jit(functools.partial(forward, config=config))
    tokens = token_rows(ByteTokenizer(), 2, 256, shared_data / "text/wikitext-2/valid.txt")

    def reference(t):
        with torch.no_grad():
            return hf(input_ids=torch.from_numpy(t.astype(np.int64))).logits.numpy()

    report = compare_logits_fns(reference, lambda t: ours(params, t), tokens)
    assert not report.passes_fp32()
    assert report.kl_mean > 10 * FP32_MAX_KL_MEAN


def test_cli_against_hf_json(shared_data, capsys):
    from app.cli import main

    code = main(["parity", "--against", "hf", "--rows", "1", "--json",
                 "--text", str(shared_data / "text/wikitext-2/valid.txt")])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["passed"] is True and result["report"]["n_tokens"] == 2048
    assert result["model"]["max_position_embeddings"] == 2048


def test_cli_refuses_unclear_requests():
    from app.cli import main

    assert main(["parity"]) == 2
    assert main(["parity", "a", "b", "--against", "hf"]) == 2
