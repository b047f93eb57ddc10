"""Held-out loss: mean next-token loss, bits per byte and a standard error over a named text set.

The documents are joined into one token stream (each preceded by end-of-text, as in pre-training)
and cut into windows of `seq_len` tokens that overlap by one token, so every token after the first
is predicted exactly once; the last window is shorter and padded. The result depends only on the
texts, the tokenizer, the config and the model: the same inputs always give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from monitor.errors import GapwatchError

from evals.protocols import LogitsFn, Tokenizer, TokenScorer
from evals.scoring import BatchShape, as_token_scorer, score_rows


@dataclass(frozen=True)
class HeldoutConfig:
    seq_len: int = 1024
    """Tokens per scored window (at most the model's context)."""
    batch_size: int = 8
    """Windows per call of the scoring function."""
    max_tokens: int | None = None
    """Score whole documents, in order, until at least this many tokens are included (None: all)."""


@dataclass
class HeldoutSet:
    """A named list of documents (texts)."""

    name: str
    documents: list[str]


@dataclass
class PreparedHeldout:
    """A held-out set tokenized and cut into windows: build once, score at every eval."""

    name: str
    windows: list[np.ndarray]
    total_bytes: int
    config: HeldoutConfig
    pad_id: int


@dataclass
class HeldoutResult:
    name: str
    loss: float
    """Mean next-token loss in nats over every scored token."""
    bpb: float
    """Bits per UTF-8 byte: total nats / ln 2 / bytes of the scored text."""
    stderr: float
    """Standard error of `loss` from the per-window variance (ratio estimator)."""
    n: int
    """Windows (sequences) scored."""
    tokens: int
    """Tokens scored (predicted)."""
    per_window: list[tuple[float, int]] = field(default_factory=list, repr=False)
    """(summed nats, tokens) of each window, for anyone who wants other statistics."""


def prepare(heldout: HeldoutSet, tokenizer: Tokenizer, config: HeldoutConfig = HeldoutConfig()
            ) -> PreparedHeldout:
    if config.seq_len < 2:
        raise GapwatchError(f"held-out seq_len must be at least 2, not {config.seq_len}")
    stream: list[int] = []
    total_bytes = 0
    for doc in heldout.documents:
        if config.max_tokens is not None and len(stream) >= config.max_tokens:
            break
        stream.append(tokenizer.eot_token_id)
        stream.extend(tokenizer.encode(doc))
        total_bytes += len(doc.encode("utf-8"))
    if len(stream) < 2 or total_bytes == 0:
        raise GapwatchError(f"held-out set {heldout.name!r} has no text to score")
    ids = np.asarray(stream, dtype=np.int32)
    stride = config.seq_len - 1
    windows = [ids[start:start + config.seq_len] for start in range(0, len(ids) - 1, stride)]
    return PreparedHeldout(heldout.name, windows, total_bytes, config, tokenizer.eot_token_id)


def ratio_stderr(nats: np.ndarray, counts: np.ndarray) -> float:
    """Standard error of sum(nats)/sum(counts) with windows as the sampling unit.

    The delta-method (linearisation) variance of a ratio estimator; with equal counts it is exactly
    the sample standard deviation of the per-window means over sqrt(n).
    """
    k = len(nats)
    if k < 2:
        return float("nan")
    mean = nats.sum() / counts.sum()
    residual = nats - mean * counts
    return float(math.sqrt(k / (k - 1) * np.sum(residual**2)) / counts.sum())


def evaluate_heldout(
    model: LogitsFn | TokenScorer,
    heldout: PreparedHeldout | HeldoutSet,
    *,
    tokenizer: Tokenizer | None = None,
    config: HeldoutConfig = HeldoutConfig(),
) -> HeldoutResult:
    """Score a prepared set (or a raw set with its tokenizer and config) with a model."""
    if isinstance(heldout, HeldoutSet):
        if tokenizer is None:
            raise GapwatchError("evaluate_heldout: a raw HeldoutSet needs its tokenizer")
        heldout = prepare(heldout, tokenizer, config)
    scorer = as_token_scorer(model)
    cfg = heldout.config
    shape = BatchShape(batch_size=cfg.batch_size, length_bucket=cfg.seq_len, max_length=cfg.seq_len)
    nats = np.empty(len(heldout.windows), dtype=np.float64)
    counts = np.empty(len(heldout.windows), dtype=np.int64)
    for i, (logp, _) in enumerate(score_rows(scorer, heldout.windows, shape, heldout.pad_id)):
        nats[i] = -np.sum(logp, dtype=np.float64)
        counts[i] = len(logp)
    total_nats = float(nats.sum())
    return HeldoutResult(
        name=heldout.name,
        loss=total_nats / int(counts.sum()),
        bpb=total_nats / math.log(2) / heldout.total_bytes,
        stderr=ratio_stderr(nats, counts),
        n=len(nats),
        tokens=int(counts.sum()),
        per_window=list(zip(nats.tolist(), counts.tolist())),
    )
