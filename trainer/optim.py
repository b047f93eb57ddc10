"""AdamW with warmup and cosine decay, driven by the train state's own step counter.

The learning rate is computed from `state["step"]` inside the train step and applied outside
optax's chain, so one counter decides both the logged and the applied rate: a resume that restores
the wrong step (trainer/faults.py) shifts the schedule for real, as it would in a real trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import optax


@dataclass(frozen=True)
class OptimConfig:
    """AdamW settings; defaults follow OLMo 2's recipe scaled to small models."""

    lr: float = 3e-3
    """Peak learning rate (small models tolerate far more than OLMo 2 7B's 3e-4)."""
    warmup_steps: int = 20
    """Linear warmup from 0 to the peak."""
    final_lr_fraction: float = 0.1
    """Cosine decay ends at this share of the peak, at the run's last step."""
    b1: float = 0.9
    """Adam first-moment decay (OLMo 2)."""
    b2: float = 0.95
    """Adam second-moment decay (OLMo 2)."""
    eps: float = 1e-8
    """Adam epsilon (OLMo 2)."""
    weight_decay: float = 0.1
    """Decoupled weight decay on weight matrices, not on norms or the input embedding (OLMo 2)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (OLMo 2)."""


LrFn = Callable[[jax.Array], jax.Array]


def schedule(config: OptimConfig, total_steps: int) -> LrFn:
    """Learning rate for the update made at (0-based) step `step`: the first update already uses
    peak / warmup_steps (a warmup from 0 would waste it), the last one the final rate."""
    curve = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.lr,
        warmup_steps=max(config.warmup_steps, 1),
        decay_steps=max(total_steps, config.warmup_steps + 1),
        end_value=config.lr * config.final_lr_fraction,
    )
    return lambda step: curve(step + 1)


def _decay_mask(params) -> dict:
    """True where weight decay applies: 2-D weights other than the input embedding."""
    def mask(path, leaf) -> bool:
        names = [getattr(p, "key", "") for p in path]
        return leaf.ndim >= 2 and "embed_tokens" not in names
    return jax.tree_util.tree_map_with_path(mask, params)


def direction(config: OptimConfig) -> optax.GradientTransformation:
    """Clipped Adam update plus decoupled weight decay, before scaling by -lr."""
    return optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.scale_by_adam(b1=config.b1, b2=config.b2, eps=config.eps),
        optax.add_decayed_weights(config.weight_decay, mask=_decay_mask),
    )


def apply(params, direction_updates, lr: jax.Array):
    """params - lr * update."""
    return jax.tree_util.tree_map(lambda p, u: p - lr.astype(p.dtype) * u, params, direction_updates)
