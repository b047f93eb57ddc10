"""From a scoring function to per-token scores, in fixed-shape batches.

Held-out loss and lm-eval's loglikelihood requests both need, for every position, the
log-probability of the next token and whether it was the model's top-1 choice. `TokenScorer`s
compute exactly that; `host_token_scorer` does it in NumPy from any logits function and
`jax_token_scorer` does it on the accelerator so that only [B, T] values cross to the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from monitor.errors import GapwatchError

from evals.protocols import LogitsFn, TokenScorer


def _check_logits(logits: np.ndarray, tokens: np.ndarray) -> None:
    if logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        raise GapwatchError(
            f"scoring function returned shape {logits.shape} for tokens {tokens.shape}; "
            "expected [B, T, vocab]"
        )


def next_token_scores(logits: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NumPy: logits [B,T,V] and tokens [B,T] -> (log p(tokens[:, 1:]), argmax == next) [B, T-1]."""
    logits = logits[:, :-1].astype(np.float32, copy=False)
    targets = tokens[:, 1:]
    peak = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - peak).sum(axis=-1)) + peak[..., 0]
    target_logit = np.take_along_axis(logits, targets[..., None].astype(np.int64), axis=-1)[..., 0]
    # argmax (first index on ties) as lm-eval's Hugging Face backend defines "greedy".
    return target_logit - lse, logits.argmax(axis=-1) == targets


@dataclass
class HostTokenScorer:
    """Any logits function, reduced to token scores on the host."""

    logits_fn: LogitsFn

    def score_tokens(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits = np.asarray(self.logits_fn(tokens))  # host-device sync: the whole [B,T,V] array
        _check_logits(logits, tokens)
        return next_token_scores(logits, tokens)


class JaxTokenScorer:
    """A JAX logits function, reduced to token scores on its device (jitted log-softmax + gather)."""

    def __init__(self, logits_fn: LogitsFn) -> None:
        import jax
        import jax.numpy as jnp

        self.logits_fn = logits_fn  # kept for generation, which needs whole distributions

        def reduce(tokens):
            logits = logits_fn(tokens)[:, :-1].astype(jnp.float32)
            targets = tokens[:, 1:]
            logp = jax.nn.log_softmax(logits, axis=-1)
            target_logp = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
            return target_logp, jnp.argmax(logits, axis=-1) == targets

        self._reduce = jax.jit(reduce)

    def score_tokens(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logp, greedy = self._reduce(tokens)
        return np.asarray(logp), np.asarray(greedy)  # host-device sync: [B, T-1] values only


def host_token_scorer(logits_fn: LogitsFn) -> TokenScorer:
    return HostTokenScorer(logits_fn)


def jax_token_scorer(logits_fn: LogitsFn) -> TokenScorer:
    return JaxTokenScorer(logits_fn)


def as_token_scorer(model: LogitsFn | TokenScorer) -> TokenScorer:
    """A TokenScorer as is; any other callable is taken for a logits function."""
    if isinstance(model, TokenScorer):
        return model
    if callable(model):
        return HostTokenScorer(model)
    raise GapwatchError(f"{type(model).__name__} is neither a logits function nor a TokenScorer")


def logits_fn_of(model: LogitsFn | TokenScorer) -> LogitsFn | None:
    """The logits function behind `model`, if it has one (a bare TokenScorer may not)."""
    if isinstance(model, TokenScorer):
        return getattr(model, "logits_fn", None)
    return model if callable(model) else None


@dataclass(frozen=True)
class BatchShape:
    """How variable-length rows become fixed-shape batches, so a jitted model compiles few shapes."""

    batch_size: int = 16
    """Rows per scoring call; short batches are filled with padding rows."""
    length_bucket: int = 64
    """Row length is rounded up to a multiple of this (padding on the right)."""
    max_length: int = 2048
    """Longest row the scoring function accepts (the model's context)."""

    def padded_length(self, longest: int) -> int:
        if longest > self.max_length:
            raise GapwatchError(f"a row of {longest} tokens exceeds max_length={self.max_length}")
        return min(self.max_length, math.ceil(longest / self.length_bucket) * self.length_bucket)


def score_rows(
    scorer: TokenScorer, rows: Sequence[Sequence[int]], shape: BatchShape, pad_id: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Scores of each row, in order: (log p, is argmax) of tokens 1..len-1 given what precedes them.

    Rows are batched in the order given; callers sort by length first when padding matters.
    """
    for start in range(0, len(rows), shape.batch_size):
        chunk = rows[start:start + shape.batch_size]
        width = shape.padded_length(max(len(r) for r in chunk))
        batch = np.full((shape.batch_size, width), pad_id, dtype=np.int32)
        for i, row in enumerate(chunk):
            batch[i, :len(row)] = row
        logp, greedy = scorer.score_tokens(batch)
        for i, row in enumerate(chunk):
            yield logp[i, :len(row) - 1], greedy[i, :len(row) - 1]
