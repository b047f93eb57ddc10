"""ScoringLM, the lm-eval model class around a scoring function, against direct computations."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM

from evals.harness import HarnessConfig, ScoringLM
from evals.scoring import jax_token_scorer
from monitor.errors import GapwatchError

TEXT = ("The tower is 324 metres tall, about the same height as an 81-storey building, and the "
        "tallest structure in Paris. Its base is square, measuring 125 metres on each side.")


def request(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def direct_logprobs(bigram, ids: list[int]) -> np.ndarray:
    return np.array([bigram.log_probs[a, b] for a, b in zip(ids[:-1], ids[1:])], dtype=np.float64)


def test_is_an_lm_eval_model(bigram, byte_tokenizer):
    assert isinstance(ScoringLM(bigram, byte_tokenizer), LM)


def test_loglikelihood_batched_equals_direct_in_any_batch_shape(bigram, byte_tokenizer):
    pairs = [(TEXT[:i], TEXT[i:i + 17]) for i in range(5, 150, 7)] + [("", "Paris")]
    expected = []
    for ctx, cont in pairs:
        # lm-eval moves a context's trailing spaces into the continuation (they are scored).
        stripped = ctx.rstrip()
        ctx, cont = stripped, ctx[len(stripped):] + cont
        ctx_ids = byte_tokenizer.encode(ctx) or [byte_tokenizer.eot_token_id]
        ids = ctx_ids + byte_tokenizer.encode(cont)
        lp = direct_logprobs(bigram, ids)[len(ctx_ids) - 1:]
        greedy = all(np.argmax(bigram.log_probs[a]) == b
                     for a, b in zip(ids[len(ctx_ids) - 1:-1], ids[len(ctx_ids):]))
        expected.append((lp.sum(), greedy))
    for shape in (HarnessConfig(batch_size=1, length_bucket=1), HarnessConfig(batch_size=8)):
        got = ScoringLM(bigram, byte_tokenizer, shape).loglikelihood(
            [request("loglikelihood", *p) for p in pairs], disable_tqdm=True)
        assert [g[0] for g in got] == pytest.approx([e[0] for e in expected], abs=1e-3)
        assert [g[1] for g in got] == [e[1] for e in expected]


def test_greedy_flag_is_true_for_the_models_own_choice(bigram, byte_tokenizer):
    lm = ScoringLM(bigram, byte_tokenizer)
    ctx = "The tower"
    best = byte_tokenizer.decode([int(np.argmax(bigram.log_probs[byte_tokenizer.encode(ctx)[-1]]))])
    worst = byte_tokenizer.decode([int(np.argmin(bigram.log_probs[byte_tokenizer.encode(ctx)[-1]]))])
    (_, greedy), (_, not_greedy) = lm.loglikelihood(
        [request("loglikelihood", ctx, best), request("loglikelihood", ctx, worst)], disable_tqdm=True)
    assert greedy and not not_greedy


def test_long_context_keeps_its_end(bigram, byte_tokenizer):
    lm = ScoringLM(bigram, byte_tokenizer, HarnessConfig(max_length=32, length_bucket=8))
    (ll, _), = lm.loglikelihood([request("loglikelihood", TEXT, " and more")], disable_tqdm=True)
    ids = byte_tokenizer.encode(TEXT + " and more")[-32:]
    assert ll == pytest.approx(direct_logprobs(bigram, ids)[-9:].sum(), abs=1e-4)


def test_a_cut_continuation_is_warned_about_once_a_process_not_once_a_checkpoint(bigram, byte_tokenizer, caplog):
    long_answer = [request("loglikelihood", "Q", " " + "a long answer " * 4)]
    for _ in range(3):  # three checkpoints evaluating the same task
        lm = ScoringLM(bigram, byte_tokenizer, HarnessConfig(max_length=24, length_bucket=8))
        with caplog.at_level(logging.DEBUG, logger="gapwatch.evals"):
            lm.loglikelihood(long_answer, disable_tqdm=True)
    said = [r for r in caplog.records if "continuations are longer than max_length=24" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]


def test_rolling_loglikelihood_covers_every_token_once(bigram, byte_tokenizer):
    lm = ScoringLM(bigram, byte_tokenizer, HarnessConfig(max_length=40, length_bucket=8))
    (total,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", TEXT)], disable_tqdm=True)
    ids = [byte_tokenizer.eot_token_id] + byte_tokenizer.encode(TEXT)
    # A bigram model sees only the previous token, so windows change nothing: the full sum.
    assert total == pytest.approx(direct_logprobs(bigram, ids).sum(), abs=1e-3)


def test_generate_until_is_greedy_and_stops(bigram, byte_tokenizer):
    lm = ScoringLM(bigram, byte_tokenizer, HarnessConfig(batch_size=2, max_length=128))
    ids = byte_tokenizer.encode("The tower")
    for _ in range(12):
        ids.append(int(np.argmax(bigram.log_probs[ids[-1]])))
    greedy_text = byte_tokenizer.decode(ids)[len("The tower"):]
    stop = greedy_text[5:7]
    out = lm.generate_until([
        request("generate_until", "The tower", {"until": ["\n\n\n"], "max_gen_toks": 12}),
        request("generate_until", "The tower", {"until": [stop], "max_gen_toks": 12}),
    ], disable_tqdm=True)
    assert out[0] == greedy_text
    assert out[1] == greedy_text.split(stop)[0]


def test_generation_needs_logits_and_refuses_sampling(bigram, byte_tokenizer):
    class ScoresOnly:
        def score_tokens(self, tokens):
            return np.zeros((tokens.shape[0], tokens.shape[1] - 1), np.float32), np.zeros(
                (tokens.shape[0], tokens.shape[1] - 1), bool)

    with pytest.raises(GapwatchError, match="needs a logits function"):
        ScoringLM(ScoresOnly(), byte_tokenizer).generate_until(
            [request("generate_until", "x", {"until": ["."]})], disable_tqdm=True)
    with pytest.raises(GapwatchError, match="only greedy"):
        ScoringLM(bigram, byte_tokenizer).generate_until(
            [request("generate_until", "x", {"until": ["."], "do_sample": True})], disable_tqdm=True)


def test_jax_scorer_gives_the_same_loglikelihoods(bigram, byte_tokenizer):
    import jax.numpy as jnp

    table = jnp.asarray(bigram.log_probs)
    reqs = [request("loglikelihood", TEXT[:40], TEXT[40:60]), request("loglikelihood", "", "Paris")]
    host = ScoringLM(bigram, byte_tokenizer).loglikelihood(reqs, disable_tqdm=True)
    device = ScoringLM(jax_token_scorer(lambda t: table[t]), byte_tokenizer).loglikelihood(
        reqs, disable_tqdm=True)
    assert [d[0] for d in device] == pytest.approx([h[0] for h in host], abs=1e-3)
    assert [d[1] for d in device] == [h[1] for h in host]
