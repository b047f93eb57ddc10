"""Held-out loss, bits per byte and standard error against direct computations."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from evals.heldout import HeldoutConfig, HeldoutSet, evaluate_heldout, prepare, ratio_stderr
from evals.heldout_data import load_jsonl, load_text_file
from evals.scoring import host_token_scorer, jax_token_scorer
from monitor.errors import GapwatchError


def direct_nats(bigram, tokenizer, documents):
    """Every next-token loss of the eot-joined stream, straight from the bigram table."""
    stream = []
    for doc in documents:
        stream += [tokenizer.eot_token_id, *tokenizer.encode(doc)]
    ids = np.asarray(stream)
    return -bigram.log_probs[ids[:-1], ids[1:]].astype(np.float64)


def test_loss_and_bpb_equal_a_direct_computation(bigram, byte_tokenizer, shared_data):
    docs = load_jsonl(shared_data / "text/lambada/lambada_test.jsonl", max_documents=40).documents
    result = evaluate_heldout(bigram, HeldoutSet("lambada", docs), tokenizer=byte_tokenizer,
                              config=HeldoutConfig(seq_len=128, batch_size=4))
    nats = direct_nats(bigram, byte_tokenizer, docs)
    assert result.tokens == len(nats)
    assert result.loss == pytest.approx(nats.mean(), rel=1e-5)
    n_bytes = sum(len(d.encode()) for d in docs)
    assert result.bpb == pytest.approx(nats.sum() / math.log(2) / n_bytes, rel=1e-5)
    assert result.n == math.ceil(len(nats) / 127)
    # A byte bigram model on English text: far below uniform (ln 257 = 5.55 nats).
    assert 2.0 < result.loss < 3.0


def test_stderr_equals_std_of_window_means_for_equal_windows(bigram, byte_tokenizer, shared_data):
    text = (shared_data / "text/wikitext-2/valid.txt").read_text()[:20_000]
    cfg = HeldoutConfig(seq_len=101, batch_size=8)
    prepared = prepare(HeldoutSet("wiki", [text]), byte_tokenizer, cfg)
    # Keep only the full windows, so each scores exactly 100 tokens.
    prepared.windows = [w for w in prepared.windows if len(w) == cfg.seq_len]
    result = evaluate_heldout(bigram, prepared)
    per_window = np.array([nats / count for nats, count in result.per_window])
    assert {count for _, count in result.per_window} == {100}
    assert result.stderr == pytest.approx(per_window.std(ddof=1) / math.sqrt(len(per_window)),
                                          rel=1e-9)


def test_ratio_stderr_weights_unequal_windows():
    nats, counts = np.array([10.0, 30.0, 5.0]), np.array([10, 20, 5])
    mean = nats.sum() / counts.sum()
    expected = math.sqrt(3 / 2 * np.sum((nats - mean * counts) ** 2)) / counts.sum()
    assert ratio_stderr(nats, counts) == pytest.approx(expected)
    assert math.isnan(ratio_stderr(nats[:1], counts[:1]))


def test_deterministic_and_jax_scorer_agrees(bigram, byte_tokenizer, shared_data):
    heldout = load_text_file(shared_data / "text/tinyshakespeare/input.txt", name="shakespeare")
    heldout.documents = [heldout.documents[0][:30_000]]
    cfg = HeldoutConfig(seq_len=256, batch_size=4)
    prepared = prepare(heldout, byte_tokenizer, cfg)
    first = evaluate_heldout(host_token_scorer(bigram.logits), prepared)
    again = evaluate_heldout(bigram, prepared)
    assert (first.loss, first.stderr, first.bpb) == (again.loss, again.stderr, again.bpb)
    table = jnp.asarray(bigram.log_probs)
    on_device = evaluate_heldout(jax_token_scorer(lambda tokens: table[tokens]), prepared)
    assert on_device.loss == pytest.approx(first.loss, rel=1e-5)
    assert on_device.n == first.n


def test_max_tokens_keeps_whole_documents(byte_tokenizer):
    docs = ["a" * 50, "b" * 50, "c" * 50]
    prepared = prepare(HeldoutSet("x", docs), byte_tokenizer, HeldoutConfig(max_tokens=60))
    assert prepared.total_bytes == 100
    assert sum(len(w) for w in prepared.windows) == 102


def test_empty_set_is_a_clear_error(byte_tokenizer):
    with pytest.raises(GapwatchError, match="no text"):
        prepare(HeldoutSet("empty", []), byte_tokenizer)


def test_nan_logits_give_a_nan_loss_not_a_crash(byte_tokenizer):
    def broken(tokens):
        return np.full((*tokens.shape, byte_tokenizer.vocab_size), np.nan, dtype=np.float32)

    result = evaluate_heldout(broken, HeldoutSet("x", ["some text here"]), tokenizer=byte_tokenizer,
                              config=HeldoutConfig(seq_len=8, batch_size=2))
    assert math.isnan(result.loss)


def test_wrong_logits_shape_is_a_clear_error(byte_tokenizer):
    with pytest.raises(GapwatchError, match="expected \\[B, T, vocab\\]"):
        evaluate_heldout(lambda t: np.zeros(t.shape, np.float32), HeldoutSet("x", ["abc"]),
                         tokenizer=byte_tokenizer, config=HeldoutConfig(seq_len=8))
