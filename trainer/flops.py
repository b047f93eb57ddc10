"""Model FLOPs per token and the peak FLOP/s of the hardware, for MFU.

Training FLOPs per token (forward + backward = 3 x forward):

    6 * N  +  3 * sum over layers of 4 * n_heads * head_dim * mean_keys(layer)

- `N` is every parameter that takes part in a matmul: all but the input embedding (a lookup),
  the output head included. This is the 6N of Kaplan et al. (2020), eq. 2.1.
- The attention term is the QK^T and AV products (2 FLOPs per multiply-add, 2 products) counted
  over the keys a query actually attends: causal full attention averages (T + 1) / 2 keys per
  query; a sliding window of W averages sum_i min(i, W) / T. PaLM's appendix B formula
  (6N + 12 L H Q T) counts every key of a non-causal layer; counting attended keys is what the
  model needs, not what a dense masked kernel happens to compute, as MFU is meant to measure.

MFU = achieved model FLOP/s / peak FLOP/s of the devices doing the work.

Peak dense bfloat16 FLOP/s per chip, from the vendors' data sheets:

| chip | TFLOP/s | source |
|---|---|---|
| NVIDIA A100 (SXM/PCIe) | 312 | NVIDIA A100 datasheet, BF16 tensor core, dense |
| NVIDIA H100 SXM | 989 | NVIDIA H100 datasheet, BF16 tensor core, dense (1979 with sparsity) |
| NVIDIA H200 | 989 | NVIDIA H200 datasheet (same compute as H100 SXM) |
| Google TPU v5p | 459 | Cloud TPU v5p documentation, BF16 |
| Google TPU v6e (Trillium) | 918 | Cloud TPU v6e documentation, BF16 |
| Google TPU v7x (Ironwood) | 2307 | Google's Ironwood announcement: 4614 FP8, half of it in BF16 |

A CPU has no data-sheet number that XLA can reach, so its peak is *measured*: the best float32
matmul throughput of this machine through XLA (`measure_cpu_peak`), cached per machine.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import platformdirs

from trainer.model import SLIDING, ModelConfig

PEAK_BF16_FLOPS = {
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
    "TPU v5p": 459e12,
    "TPU v6e": 918e12,
    "TPU v7x": 2307e12,
}

# jax's device_kind strings for the chips above (TPUs report lite/7x names, GPUs the product name).
_KIND_ALIASES = (
    ("H200", "H200"), ("H100", "H100"), ("A100", "A100"),
    ("TPU v5p", "TPU v5p"), ("TPU v5", "TPU v5p"),  # v5p reports "TPU v5"; v5e reports "TPU v5 lite"
    ("TPU v6 lite", "TPU v6e"), ("TPU v6e", "TPU v6e"),
    ("TPU7x", "TPU v7x"), ("TPU v7", "TPU v7x"),
)

CPU_PEAK_MATMUL_SIZE = 1024  # large enough to be compute-bound, small enough to take ~0.1 s
CPU_PEAK_REPEATS = 10


def mean_attended_keys(seq_len: int, window: int | None) -> float:
    """Average number of keys a query attends in a causal layer (sliding when window is set)."""
    positions = np.arange(1, seq_len + 1)
    keys = positions if window is None else np.minimum(positions, window)
    return float(keys.mean())


def attention_flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Training FLOPs of QK^T and AV per token, summed over layers."""
    total = 0.0
    for layer_type in config.layer_types:
        window = config.sliding_window if layer_type == SLIDING else None
        total += 4 * config.n_heads * config.head_dim * mean_attended_keys(seq_len, window)
    return 3 * total  # backward is twice the forward


def flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6N (matmul parameters) + the attention term."""
    return 6 * config.non_embedding_param_count() + attention_flops_per_token(config, seq_len)


def chip_peak_flops(device_kind: str) -> float | None:
    """Data-sheet peak of one accelerator chip, or None when the chip is not in the table."""
    for needle, chip in _KIND_ALIASES:
        if needle in device_kind and not (needle == "TPU v5" and "lite" in device_kind):
            return PEAK_BF16_FLOPS[chip]
    return None


def measure_cpu_peak(size: int = CPU_PEAK_MATMUL_SIZE, repeats: int = CPU_PEAK_REPEATS) -> float:
    """Best float32 matmul FLOP/s of this machine's CPU through XLA (all cores)."""
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    a = jax.device_put(jnp.ones((size, size), jnp.float32), cpu)
    matmul = jax.jit(lambda x: x @ x)
    matmul(a).block_until_ready()  # compile outside the timing
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def cpu_peak_flops(cache_dir: Path | None = None) -> float:
    """The measured CPU peak, from a per-machine cache when this machine was measured before."""
    cache = (cache_dir or Path(platformdirs.user_cache_dir("gapwatch"))) / "cpu_peak.json"
    machine = f"{platform.node()}|{platform.processor() or platform.machine()}|{os.cpu_count()}"
    try:
        saved = json.loads(cache.read_text())
        if saved.get("machine") == machine:
            return float(saved["flops"])
    except (OSError, ValueError, KeyError):
        pass
    flops = measure_cpu_peak()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"machine": machine, "flops": flops}))
    return flops


def peak_flops(devices, process_count: int = 1) -> float | None:
    """Peak FLOP/s of all `devices` of a job; None when unknown (then MFU is not logged).

    Virtual CPU devices share their process's CPU, so a CPU counts once per process (each process
    is taken to run on a machine of its own), not once per device.
    """
    if not devices:
        return None
    if devices[0].platform == "cpu":
        return cpu_peak_flops() * process_count
    per_chip = chip_peak_flops(devices[0].device_kind)
    return None if per_chip is None else per_chip * len(devices)
