"""A bigram language model over token ids: a real, deterministic, instant scoring function.

It is the smallest model that still prefers likely text to unlikely text, which is what the eval
pipeline needs to be exercised end to end (tests, benchmarks, smoke checks) without a trained
transformer. Interpolated with the unigram distribution (Jelinek–Mercer smoothing) so that no
probability is zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from monitor.errors import GapwatchError

from evals.protocols import Tokenizer


@dataclass(frozen=True)
class BigramConfig:
    bigram_weight: float = 0.9
    """Share of the bigram estimate in the interpolation (the rest is the unigram estimate)."""
    add_k: float = 0.1
    """Pseudo-count per token in the unigram estimate, so unseen tokens keep some mass."""


class BigramModel:
    """log p(next | current) as a [V, V] table; `logits(tokens)` is a LogitsFn."""

    def __init__(self, log_probs: np.ndarray) -> None:
        self.log_probs = log_probs.astype(np.float32)

    @classmethod
    def fit(cls, texts: Iterable[str], tokenizer: Tokenizer,
            config: BigramConfig = BigramConfig()) -> "BigramModel":
        v = tokenizer.vocab_size
        pair_counts = np.zeros((v, v), dtype=np.float64)
        for text in texts:
            ids = np.asarray([tokenizer.eot_token_id, *tokenizer.encode(text)], dtype=np.int64)
            np.add.at(pair_counts, (ids[:-1], ids[1:]), 1.0)
        if pair_counts.sum() == 0:
            raise GapwatchError("bigram model: no training text")
        unigram = pair_counts.sum(axis=0) + config.add_k
        unigram /= unigram.sum()
        row_totals = pair_counts.sum(axis=1, keepdims=True)
        bigram = np.divide(pair_counts, row_totals, out=np.zeros_like(pair_counts),
                           where=row_totals > 0)
        # A context never seen in training falls back to the unigram estimate alone.
        weight = np.where(row_totals > 0, config.bigram_weight, 0.0)
        return cls(np.log(weight * bigram + (1 - weight) * unigram[None, :]))

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        return self.log_probs[np.asarray(tokens)]

    __call__ = logits
