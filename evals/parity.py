"""Logit parity: how closely two scoring functions agree on the same tokens.

Per position, with P the reference's next-token distribution and Q the candidate's:
KL(P || Q) in nats, whether the top-1 tokens agree, the overlap of the top-k sets, and the largest
absolute logit difference. Everything is computed in float64 from float32 logits, so the measure
itself adds no error at the 1e-6 level that fp32 parity is held to.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from monitor.errors import GapwatchError

from evals.protocols import LogitsFn

# The bar for two float32 implementations of one model (issue 4): they may differ only by
# floating-point reassociation, which moves logits by ~1e-6 and KL by far less.
FP32_MAX_KL_MEAN = 1e-6
FP32_MIN_TOP1 = 0.999


@dataclass(frozen=True)
class PublishedParity:
    """Parity figures someone reported, to print ours beside."""

    label: str
    kl_mean: float
    top1: float
    n_tokens: int


# What the OLMo 3 7B reproduction measured between its JAX port and the PyTorch reference in
# bfloat16 on 8,192 tokens of real text.
REPRODUCTION_BF16 = PublishedParity("OLMo 3 7B reproduction, bf16", 1.5e-3, 0.9875, 8192)


@dataclass(frozen=True)
class WorstPosition:
    row: int
    position: int
    kl: float
    reference_top1: int
    candidate_top1: int
    max_abs_logit_diff: float


@dataclass
class ParityReport:
    kl_mean: float
    """Mean over positions of KL(reference || candidate), nats."""
    kl_max: float
    top1: float
    """Share of positions where both put the same token first."""
    topk_overlap: float
    """Mean of |top-k(reference) ∩ top-k(candidate)| / k."""
    top_k: int
    max_abs_logit_diff: float
    n_tokens: int
    worst: list[WorstPosition] = field(default_factory=list)
    """The positions with the largest KL, largest first."""

    def passes_fp32(self, max_kl_mean: float = FP32_MAX_KL_MEAN,
                    min_top1: float = FP32_MIN_TOP1) -> bool:
        return self.kl_mean < max_kl_mean and self.top1 >= min_top1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


class ParityAccumulator:
    """Adds up batches of logit pairs, so long texts never need all logits in memory at once."""

    def __init__(self, top_k: int = 5, n_worst: int = 5) -> None:
        if top_k < 1:
            raise GapwatchError(f"top_k must be at least 1, not {top_k}")
        self.top_k, self.n_worst = top_k, n_worst
        self._kl_sum = 0.0
        self._kl_max = 0.0
        self._agree = 0
        self._overlap = 0.0
        self._max_diff = 0.0
        self._n = 0
        self._worst: list[tuple[float, int, WorstPosition]] = []
        self._rows_seen = 0

    def add(self, reference: np.ndarray, candidate: np.ndarray, mask: np.ndarray | None = None
            ) -> None:
        """reference, candidate: logits [B, T, V]; mask [B, T] marks the positions to compare."""
        ref = np.asarray(reference, dtype=np.float64)
        cand = np.asarray(candidate, dtype=np.float64)
        if ref.shape != cand.shape or ref.ndim != 3:
            raise GapwatchError(f"logits shapes differ or are not [B, T, V]: {ref.shape} vs {cand.shape}")
        if mask is None:
            mask = np.ones(ref.shape[:2], dtype=bool)
        rows, positions = np.nonzero(mask)
        ref, cand = ref[rows, positions], cand[rows, positions]  # [N, V]
        if not np.isfinite(ref).all() or not np.isfinite(cand).all():
            raise GapwatchError("logits contain NaN or Inf: parity is undefined")
        log_p, log_q = _log_softmax(ref), _log_softmax(cand)
        # Clipped at 0: KL is non-negative, float rounding can make a near-zero value negative.
        kl = np.maximum((np.exp(log_p) * (log_p - log_q)).sum(axis=-1), 0.0)
        top_ref, top_cand = ref.argmax(axis=-1), cand.argmax(axis=-1)
        k = min(self.top_k, ref.shape[-1])
        set_ref = np.argpartition(-ref, k - 1, axis=-1)[:, :k]
        set_cand = np.argpartition(-cand, k - 1, axis=-1)[:, :k]
        overlap = (set_ref[:, :, None] == set_cand[:, None, :]).any(axis=-1).sum(axis=-1) / k
        diff = np.abs(ref - cand).max(axis=-1)
        self._kl_sum += float(kl.sum())
        self._kl_max = max(self._kl_max, float(kl.max(initial=0.0)))
        self._agree += int((top_ref == top_cand).sum())
        self._overlap += float(overlap.sum())
        self._max_diff = max(self._max_diff, float(diff.max(initial=0.0)))
        self._n += len(kl)
        for i in np.argsort(-kl)[: self.n_worst]:
            item = WorstPosition(int(rows[i]) + self._rows_seen, int(positions[i]), float(kl[i]),
                                 int(top_ref[i]), int(top_cand[i]), float(diff[i]))
            heapq.heappush(self._worst, (item.kl, self._n - len(kl) + int(i), item))
            if len(self._worst) > self.n_worst:
                heapq.heappop(self._worst)
        self._rows_seen += mask.shape[0]

    def report(self) -> ParityReport:
        if self._n == 0:
            raise GapwatchError("parity: no positions were compared")
        return ParityReport(
            kl_mean=self._kl_sum / self._n, kl_max=self._kl_max, top1=self._agree / self._n,
            topk_overlap=self._overlap / self._n, top_k=self.top_k,
            max_abs_logit_diff=self._max_diff, n_tokens=self._n,
            worst=[w for _, _, w in sorted(self._worst, key=lambda t: (-t[0], t[1]))])


def compare_logits(reference: np.ndarray, candidate: np.ndarray, *, mask: np.ndarray | None = None,
                   top_k: int = 5, n_worst: int = 5) -> ParityReport:
    acc = ParityAccumulator(top_k, n_worst)
    acc.add(reference, candidate, mask)
    return acc.report()


def compare_logits_fns(reference: LogitsFn, candidate: LogitsFn, tokens: np.ndarray, *,
                       batch_size: int = 1, top_k: int = 5, n_worst: int = 5) -> ParityReport:
    """Both functions on the same token rows [N, T], `batch_size` rows at a time."""
    tokens = np.asarray(tokens, dtype=np.int32)
    if tokens.ndim != 2 or tokens.size == 0:
        raise GapwatchError(f"parity tokens must be a non-empty [rows, length] array, not {tokens.shape}")
    acc = ParityAccumulator(top_k, n_worst)
    for start in range(0, tokens.shape[0], batch_size):
        batch = tokens[start:start + batch_size]
        # host-device sync: both logit arrays come to the host to be compared in float64
        acc.add(np.asarray(reference(batch)), np.asarray(candidate(batch)))
    return acc.report()

