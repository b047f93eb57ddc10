"""Hugging Face `Olmo3ForCausalLM` state dicts to our parameter pytree.

Our parameter names are the Hugging Face names and our shapes are the Hugging Face shapes
(trainer/model.py), so conversion is a checked copy: every expected tensor present with its
expected shape, nothing left over, everything float32 on the host.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from monitor.errors import GapwatchError
from trainer.model import ModelConfig, Params, check_params, param_shapes, unflatten

# transformers keeps RoPE frequencies as non-persistent buffers, but older exports carry them in the
# state dict; they are derived from the config, so they are not weights.
_DERIVED_SUFFIXES = ("rotary_emb.inv_freq",)


def _to_numpy(value: Any) -> np.ndarray:
    """A torch tensor (any dtype, any device) or array-like as a float32 NumPy array."""
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
        value = value.detach().to("cpu")
        if str(value.dtype) == "torch.bfloat16":  # NumPy has no bfloat16
            value = value.float()
        value = value.numpy()
    return np.asarray(value, dtype=np.float32)


def params_from_hf(state_dict: Mapping[str, Any], config: ModelConfig) -> Params:
    """An `Olmo3ForCausalLM.state_dict()` (torch tensors or arrays) -> our params (NumPy float32).

    Pass the result through `jax.device_put` (or let `jax.jit` do it) to use it on a device.
    """
    expected = param_shapes(config)
    flat = {}
    for name, value in state_dict.items():
        if name.endswith(_DERIVED_SUFFIXES):
            continue
        if name not in expected:
            raise GapwatchError(f"Hugging Face state dict: unexpected tensor {name!r} for this config")
        flat[name] = _to_numpy(value)
    params = unflatten(flat)
    check_params(params, config)
    return params
