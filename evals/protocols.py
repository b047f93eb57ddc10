"""What `evals/` needs from a model: a scoring function and a tokenizer, nothing else.

Everything in this package works on these protocols, never on one particular model, so the same
held-out loss, downstream evals and parity checks run on our JAX trainer, a Hugging Face model or a
byte n-gram model.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

LogitsFn = Callable[[np.ndarray], Any]
"""tokens int32 [B, T] -> logits float32 [B, T, V] (NumPy or jax.Array).

Must be causal: logits[:, t] depends only on tokens[:, :t+1]. Callers pad on the right and rely on
that to ignore the padding.
"""


@runtime_checkable
class TokenScorer(Protocol):
    """tokens int32 [B, T] -> (log p(next token) float32 [B, T-1], next token is argmax bool [B, T-1]).

    The reduced form of a LogitsFn: all that held-out loss and loglikelihood requests need, so an
    implementation on an accelerator only has to send [B, T] values to the host, not [B, T, V].
    """

    def score_tokens(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class Tokenizer(Protocol):
    """Text <-> token ids. `eot_token_id` separates documents, stands in for an empty context and
    pads on the right."""

    vocab_size: int
    eot_token_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...
