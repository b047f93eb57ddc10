"""Runs in a subprocess with a chosen number of (virtual CPU) devices, set by XLA_FLAGS before jax
is imported: trains tiny runs, or computes a checkpoint's logits with the batch sharded over
every device.

    python checkpoint_worker.py train ROOT
    python checkpoint_worker.py logits CHECKPOINT TOKENS.npy OUT.npy
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUNS = {"a": 0, "b": 1}  # run name -> seed; same config, so their checkpoints align on tokens


def train(root: Path) -> None:
    import dataclasses

    from trainer.config import PRESETS
    from trainer.loop import RunOptions, train as run_training

    tiny = PRESETS["tiny"]
    # 4 steps of 8 x 64 tokens need little text; a small corpus keeps tokenizer training short.
    data = dataclasses.replace(tiny.data, corpus=dataclasses.replace(
        tiny.data.corpus, max_train_chars=60_000, max_heldout_chars=5_000))
    for name, seed in RUNS.items():
        config = tiny.replace(steps=4, checkpoint_every=2, seed=seed, data=data, preflight=False)
        run_training(config, RunOptions(run=name, store=f"sqlite:///{root / 'store.db'}",
                                        run_dir=root / name, console_every=0))


def logits(checkpoint: Path, tokens_path: Path, out: Path) -> None:
    """One row per device per call: the per-device shape stays the same whatever the device count
    (XLA's CPU matmuls pick their blocking by shape, so a different batch shape changes the last
    bits; a different device count at the same per-device shape must change nothing)."""
    import functools

    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from trainer.checkpoint import load_for_eval
    from trainer.model import forward

    model = load_for_eval(checkpoint)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    params = jax.device_put(model.params, NamedSharding(mesh, PartitionSpec()))
    fn = jax.jit(functools.partial(forward, config=model.config))
    tokens = np.load(tokens_path)
    n = jax.device_count()
    parts = [fn(params, jax.device_put(tokens[i:i + n], NamedSharding(mesh, PartitionSpec("data"))))
             for i in range(0, len(tokens), n)]
    np.save(out, np.concatenate([np.asarray(p) for p in parts]))
    print(f"devices={jax.device_count()}")


def run_worker(*args: str, devices: int, env_dir: Path) -> str:
    """This script in a fresh process with `devices` virtual CPU devices; returns its stdout."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(repo),
           "XDG_CACHE_HOME": str(env_dir / "cache"), "XDG_DATA_HOME": str(env_dir / "data")}
    out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True,
                         text=True, timeout=600, cwd=repo)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "train":
        train(Path(rest[0]))
    else:
        logits(*(Path(p) for p in rest))
