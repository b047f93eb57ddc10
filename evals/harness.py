"""lm-evaluation-harness on any scoring function: an `lm_eval` model class around a TokenScorer.

`ScoringLM` subclasses lm-eval's `TemplateLM` (an `LM`), which already encodes (context,
continuation) pairs the way lm-eval's own Hugging Face backend does; we add batched scoring in
fixed-shape batches, rolling windows for perplexity tasks, and greedy generation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import handle_stop_sequences
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from monitor.errors import GapwatchError

from evals.protocols import LogitsFn, Tokenizer, TokenScorer
from evals.scoring import BatchShape, as_token_scorer, logits_fn_of, score_rows

log = logging.getLogger("gapwatch.evals")
# (continuations cut, requests, max_length) already warned about in this process.
_CUTS_SAID: set[tuple[int, int, int]] = set()


@dataclass(frozen=True)
class HarnessConfig:
    batch_size: int = 16
    """Sequences per call of the scoring function."""
    max_length: int = 2048
    """The model's context: the longest sequence it is given (longer contexts keep their end)."""
    length_bucket: int = 64
    """Sequence lengths are padded up to a multiple of this, so a jitted model compiles few shapes."""
    max_gen_toks: int = 256
    """Generation budget when a task does not set `max_gen_toks` itself (lm-eval's default)."""

    @property
    def batch_shape(self) -> BatchShape:
        return BatchShape(self.batch_size, self.length_bucket, self.max_length)


class ScoringLM(TemplateLM):
    """An lm-eval model backed by a scoring function (logits or token scores) and a tokenizer."""

    def __init__(self, model: LogitsFn | TokenScorer, tokenizer: Tokenizer,
                 config: HarnessConfig = HarnessConfig()) -> None:
        super().__init__()
        self._scorer = as_token_scorer(model)
        self._logits_fn = logits_fn_of(model)
        self._tokenizer = tokenizer
        self.config = config

    # --- what TemplateLM needs ---------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self._tokenizer.eot_token_id

    @property
    def max_length(self) -> int:
        return self.config.max_length

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self._tokenizer.encode(string)

    def tok_decode(self, tokens: list[int]) -> str:
        return self._tokenizer.decode(tokens)

    # --- scoring ----------------------------------------------------------------------------------
    def _score_continuations(self, rows: list[list[int]], n_scored: list[int],
                             desc: str, disable_tqdm: bool) -> list[tuple[float, bool]]:
        """(sum log p, all greedy) of the last n_scored[i] tokens of each row, in input order."""
        # Longest first, so each batch pads to about its own length (as lm-eval's backends sort).
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        results: list[tuple[float, bool]] = [(0.0, True)] * len(rows)
        bar = tqdm(total=len(rows), desc=desc, disable=disable_tqdm)
        scored = score_rows(self._scorer, [rows[i] for i in order], self.config.batch_shape,
                            self.eot_token_id)
        for i, (logp, greedy) in zip(order, scored):
            n = n_scored[i]
            results[i] = (float(np.sum(logp[-n:], dtype=np.float64)), bool(np.all(greedy[-n:])))
            bar.update(1)
        bar.close()
        return results

    def _loglikelihood_tokens(self, requests: list[tuple[tuple[str, str], list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        rows, n_scored, cut = [], [], 0
        for _, context_enc, continuation_enc in requests:
            # Keep the end of an over-long context: the tokens nearest the continuation matter most.
            # A continuation longer than the context itself keeps its last max_length - 1 tokens
            # (a model with a short context, e.g. a tiny test model, still gets a defined score).
            rows.append((context_enc + continuation_enc)[-self.max_length:])
            n_scored.append(min(len(continuation_enc), self.max_length - 1))
            cut += len(continuation_enc) > self.max_length - 1
        if cut:
            # A trainer evaluating the same tasks at every checkpoint cuts the same continuations each
            # time: said once a process, not once a checkpoint.
            said = (cut, len(requests), self.max_length) in _CUTS_SAID
            _CUTS_SAID.add((cut, len(requests), self.max_length))
            log.log(logging.DEBUG if said else logging.WARNING,
                    "%d of %d continuations are longer than max_length=%d: only their last %d tokens were scored",
                    cut, len(requests), self.max_length, self.max_length - 1)
        results = self._score_continuations(rows, n_scored, "loglikelihood", disable_tqdm)
        for (pair, _, _), result in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", pair, result)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Whole-document log-likelihood in windows of max_length (lm-eval's rolling windows)."""
        rows, n_scored, owner = [], [], []
        for doc_index, (string,) in enumerate(req.args for req in requests):
            windows = get_rolling_token_windows(
                token_list=self.tok_encode(string), prefix_token=self.eot_token_id,
                max_seq_len=self.max_length - 1, context_len=1)
            for context, continuation in map(make_disjoint_window, windows):
                rows.append(context + continuation)
                n_scored.append(len(continuation))
                owner.append(doc_index)
        totals = [0.0] * len(requests)
        for doc_index, (logp, _) in zip(
                owner, self._score_continuations(rows, n_scored, "loglikelihood_rolling",
                                                 disable_tqdm)):
            totals[doc_index] += logp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # --- generation -------------------------------------------------------------------------------
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy decoding, one forward pass over the whole sequence per new token (no KV cache:
        the scoring-function protocol has none; fine for the short answers eval tasks generate)."""
        if self._logits_fn is None:
            raise GapwatchError("generation needs a logits function; this model only scores tokens")
        outputs: list[str] = []
        size = self.config.batch_size
        for start in tqdm(range(0, len(requests), size), desc="generate_until",
                          disable=disable_tqdm):
            outputs += self._generate_batch([r.args for r in requests[start:start + size]])
        for req, text in zip(requests, outputs):
            self.cache_hook.add_partial("generate_until", req.args, text)
        return outputs

    def _generate_batch(self, batch: list[tuple[str, dict]]) -> list[str]:
        eot_text = self.tok_decode([self.eot_token_id]) or None
        plans = []
        for context, gen_kwargs in batch:
            gen_kwargs = dict(gen_kwargs or {})
            if gen_kwargs.get("do_sample") or (gen_kwargs.get("temperature") or 0) > 0:
                raise GapwatchError("generate_until: only greedy decoding is supported")
            until = handle_stop_sequences(gen_kwargs.get("until"), eos=eot_text)
            budget = int(gen_kwargs.get("max_gen_toks", self.config.max_gen_toks))
            if budget >= self.max_length:
                raise GapwatchError(f"max_gen_toks={budget} leaves no room in max_length={self.max_length}")
            # Keep room for the answer: the context keeps its last max_length - budget tokens.
            prompt = (self.tok_encode(context) or [self.eot_token_id])[-(self.max_length - budget):]
            plans.append((prompt, until, budget))
        generated: list[list[int]] = [[] for _ in plans]
        done = [False] * len(plans)
        shape = self.config.batch_shape
        while not all(done):
            seqs = [p[0] + g for p, g in zip(plans, generated)]
            width = shape.padded_length(max(len(s) for s in seqs))
            tokens = np.full((shape.batch_size, width), self.eot_token_id, dtype=np.int32)
            for i, s in enumerate(seqs):
                tokens[i, :len(s)] = s
            logits = np.asarray(self._logits_fn(tokens))  # host-device sync: one step of decoding
            for i, (s, (_, until, budget)) in enumerate(zip(seqs, plans)):
                if done[i]:
                    continue
                next_id = int(np.argmax(logits[i, len(s) - 1]))
                if next_id == self.eot_token_id:
                    done[i] = True
                    continue
                generated[i].append(next_id)
                text = self.tok_decode(generated[i])
                done[i] = len(generated[i]) >= budget or any(u and u in text for u in until)
        outputs = []
        for (_, until, _), ids in zip(plans, generated):
            text = self.tok_decode(ids)
            for stop in until:
                if stop:
                    text = text.split(stop)[0]
            outputs.append(text)
        return outputs
