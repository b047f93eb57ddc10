"""Held-out loss and downstream evals of the model being trained, through evals/.

evals/ works on a scoring function. The one here takes the parameters as a jit *argument*, not as
a constant captured at trace time, so one compilation serves every evaluation of the run while the
parameters change. Each evaluation fetches scores to the host: a deliberate, periodic sync point.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from evals.heldout import HeldoutConfig, HeldoutSet, evaluate_heldout, prepare
from evals.monitor_log import log_downstream, log_heldout
from monitor.errors import GapwatchError
from trainer.config import EvalConfig
from trainer.model import ModelConfig, Params, forward
from trainer.tokenizer import Tokenizer


def _token_scores(params: Params, tokens: jax.Array, config: ModelConfig):
    logits = forward(params, tokens, config)[:, :-1]
    targets = tokens[:, 1:]
    logp = jax.nn.log_softmax(logits, axis=-1)
    target_logp = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return target_logp, jnp.argmax(logits, axis=-1) == targets


class ParamsScorer:
    """An `evals.protocols.TokenScorer` (and logits function) over whatever `params` are set."""

    def __init__(self, config: ModelConfig, params: Params | None = None) -> None:
        self.params = params
        self._scores = jax.jit(functools.partial(_token_scores, config=config))
        self._logits = jax.jit(functools.partial(forward, config=config))

    def score_tokens(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logp, greedy = self._scores(self.params, tokens)
        return np.asarray(logp), np.asarray(greedy)  # host-device sync: [B, T-1] values

    def logits_fn(self, tokens: np.ndarray) -> jax.Array:
        """Whole distributions, for lm-eval's generation tasks."""
        return self._logits(self.params, tokens)


def local_copy(params: Params) -> Params:
    """This process's replica of data-parallel params, on one local device (no communication)."""
    return jax.tree_util.tree_map(lambda x: x.addressable_data(0), params)


class InLoopEvals:
    """Runs the configured evals at their steps and logs them through `sink` (monitor-like)."""

    def __init__(self, config: EvalConfig, model: ModelConfig, tokenizer: Tokenizer,
                 heldout_name: str, heldout_docs: list[str]) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.scorer = ParamsScorer(model)
        self.heldout = None
        if config.heldout_every:
            if not heldout_docs:
                raise GapwatchError("the corpus has no held-out documents; raise heldout_fraction "
                                    "or set heldout_every to 0")
            self.heldout = prepare(
                HeldoutSet(heldout_name, heldout_docs), tokenizer,
                HeldoutConfig(seq_len=model.max_seq_len, batch_size=config.heldout_batch_size,
                              max_tokens=config.heldout_max_tokens))
        self.max_seq_len = model.max_seq_len

    def due(self, step: int) -> bool:
        c = self.config
        return bool((c.heldout_every and step % c.heldout_every == 0)
                    or (c.downstream_every and step % c.downstream_every == 0))

    def run(self, step: int, params: Params, sink) -> None:
        c = self.config
        self.scorer.params = local_copy(params)
        try:
            if c.heldout_every and step % c.heldout_every == 0:
                log_heldout(sink, step, [evaluate_heldout(self.scorer, self.heldout)])
            if c.downstream_every and step % c.downstream_every == 0:
                log_downstream(sink, step, self._downstream())
        finally:
            self.scorer.params = None  # the next train step donates these buffers

    def _downstream(self):
        # lm-eval is imported only by runs that use it: it costs seconds at start-up.
        from evals.downstream import DownstreamConfig, run_tasks
        from evals.harness import HarnessConfig

        c = self.config
        config = DownstreamConfig(
            limit=c.downstream_limit,
            harness=HarnessConfig(batch_size=c.heldout_batch_size, max_length=self.max_seq_len,
                                  length_bucket=max(self.max_seq_len // 4, 1)))
        data_dir = Path(c.downstream_data_dir) if c.downstream_data_dir else None
        return run_tasks(self.scorer, self.tokenizer, c.downstream_tasks, data_dir=data_dir,
                         config=config).results
