"""The train state and the jitted train step, which also computes every per-step metric on device.

The step returns its metrics as device scalars; the caller hands them to the logging client, which
fetches them on its own thread a step or more later, so the training thread never waits for a value.
Data coverage is counted on device too: a per-record read counter lives in the train state (and so
in every checkpoint), updated from the record ids that travel with each global batch.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from monitor import schema
from trainer import optim
from trainer.model import ModelConfig, forward, init_params

TrainState = dict[str, Any]  # params, opt_state, step (int32), coverage (int32 [records])
Batch = dict[str, jax.Array]  # tokens [B, T+1], record [B], position [B] (trainer/data.py)
DATA_AXIS = "data"


def init_state(model: ModelConfig, optimizer: optax.GradientTransformation, records_per_epoch: int,
               seed: int) -> TrainState:
    params = init_params(model, jax.random.key(seed))
    return {
        "params": params,
        "opt_state": optimizer.init(params),
        "step": jnp.zeros((), jnp.int32),
        "coverage": jnp.zeros((records_per_epoch,), jnp.int32),
    }


def next_token_loss(params, tokens: jax.Array, model: ModelConfig) -> tuple[jax.Array, jax.Array]:
    """Mean cross-entropy of predicting tokens[:, 1:] from tokens[:, :-1], in float32, and each
    sequence's own mean (the auxiliary output: it costs nothing beside the loss)."""
    logits = forward(params, tokens[:, :-1], model)
    per_token = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
    return per_token.mean(), per_token.mean(axis=1)


def reread_split(per_record: jax.Array, reread: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Share of the batch read before, and mean loss of first reads minus re-reads (0 when the batch
    holds only one kind)."""
    n = reread.size
    n_reread = jnp.sum(reread)
    n_first = n - n_reread
    mean_reread = jnp.sum(jnp.where(reread, per_record, 0.0)) / jnp.maximum(n_reread, 1)
    mean_first = jnp.sum(jnp.where(reread, 0.0, per_record)) / jnp.maximum(n_first, 1)
    both = (n_reread > 0) & (n_first > 0)
    return n_reread / n, jnp.where(both, mean_first - mean_reread, 0.0)


def make_train_step(
    model: ModelConfig,
    optimizer: optax.GradientTransformation,
    lr_fn: optim.LrFn,
    records_per_epoch: int,
    mesh: jax.sharding.Mesh,
    state_example: TrainState,
) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, jax.Array]]]:
    """A jitted `step(state, batch) -> (state, metrics)`; the old state's buffers are donated."""

    def train_step(state: TrainState, batch: Batch):
        (loss, per_record), grads = jax.value_and_grad(next_token_loss, has_aux=True)(
            state["params"], batch["tokens"], model)
        reread_fraction, reread_gap = reread_split(per_record, state["coverage"][batch["record"]] > 0)
        lr = lr_fn(state["step"])
        direction, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        coverage = state["coverage"].at[batch["record"]].add(1)
        cursor = batch["position"].sum()
        new_state = {
            "params": optim.apply(state["params"], direction, lr),
            "opt_state": opt_state,
            "step": state["step"] + 1,
            "coverage": coverage,
        }
        metrics = {
            schema.TRAIN_LOSS: loss,
            schema.TRAIN_GRAD_NORM: optax.tree.norm(grads),
            schema.OPTIM_LR: lr,
            schema.DATA_CURSOR: cursor,
            schema.DATA_EPOCH: cursor / records_per_epoch,
            schema.DATA_UNIQUE_FRACTION: jnp.mean(coverage > 0),
            schema.DATA_SEEN_ONCE_FRACTION: jnp.mean(coverage == 1),
            schema.DATA_SEEN_2PLUS_FRACTION: jnp.mean(coverage >= 2),
            schema.DATA_BATCH_REREAD_FRACTION: reread_fraction,
            schema.TRAIN_REREAD_LOSS_GAP: reread_gap,
        }
        return new_state, metrics

    replicated = state_sharding(mesh, state_example)
    batch_sharding = NamedSharding(mesh, PartitionSpec(DATA_AXIS))
    return jax.jit(
        train_step,
        in_shardings=(replicated, batch_sharding),
        out_shardings=(replicated, NamedSharding(mesh, PartitionSpec())),
        donate_argnums=0,
    )


def state_sharding(mesh: jax.sharding.Mesh, state: TrainState):
    """Pure data parallelism: every device holds the whole state."""
    full = NamedSharding(mesh, PartitionSpec())
    return jax.tree_util.tree_map(lambda _: full, state)


def expected_unique_fraction(steps_done: int, global_batch_size: int, records_per_epoch: int) -> float:
    """What the sampling plan promises: each epoch reads every record once, so after c records the
    share seen is c / records_per_epoch, capped at 1."""
    return min(steps_done * global_batch_size, records_per_epoch) / records_per_epoch
