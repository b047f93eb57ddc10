"""Shared set-up of the trainer tests: tiny configs, one corpus cache and one compilation cache.

Every test still runs the real pipeline end to end; sharing the caches only spares the suite
re-tokenizing the same text and re-compiling the same train step in each test.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import jax
import pytest

from trainer.config import PRESETS, TrainConfig
from trainer.loop import RunOptions, train

REPO = Path(__file__).resolve().parents[2]
# The tests do not measure MFU against this machine's peak; a fixed peak skips that measurement.
TEST_PEAK_FLOPS = 1e11


@pytest.fixture(scope="session")
def caches(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trainer-caches")
    compilation = root / "jax"
    jax.config.update("jax_compilation_cache_dir", str(compilation))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    # Child processes get `root` as XDG_CACHE_HOME, so they find the same corpus cache by default.
    return {"xdg": root, "corpus": root / "gapwatch" / "corpora", "jax": compilation}


# Runs of the same length compile the same program (the schedule's length is part of it), so
# in-process tests use this length and share compilations.
TEST_STEPS = 30


def tiny_config(caches) -> TrainConfig:
    """The tiny preset with the shared corpus cache and a fixed peak for MFU."""
    base = PRESETS["tiny"]
    return base.replace(data=dataclasses.replace(base.data, cache_dir=str(caches["corpus"])),
                        peak_flops=TEST_PEAK_FLOPS, steps=TEST_STEPS)


@pytest.fixture
def tiny(caches) -> TrainConfig:
    return tiny_config(caches)


class FetchProbe:
    """On CPU, JAX guards no device-to-host transfer (device memory is host memory). This probe
    applies the accelerator rule instead: a value fetched from a jax.Array on a thread whose
    transfer guard says 'disallow' is a host-device sync inside the training loop. It records the
    fetch and raises, as the guard does on a GPU or TPU."""

    def __init__(self) -> None:
        self.violations: list[tuple] = []

    def install(self, monkeypatch) -> "FetchProbe":
        from jax._src import array as jax_array
        from jax._src import config as jax_config

        original = jax_array.ArrayImpl._value

        def guarded(array):
            if jax_config.transfer_guard_device_to_host.value in ("disallow", "disallow_explicit"):
                self.violations.append(array.shape)
                raise RuntimeError("Disallowed device-to-host transfer on the training thread")
            return original.fget(array)

        monkeypatch.setattr(jax_array.ArrayImpl, "_value", property(guarded))
        return self


DOWNSTREAM_LIMIT = 4  # ARC-Easy questions per downstream eval in the clean run


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory, caches, shared_data):
    """One clean tiny run shared by several test modules: held-out and downstream evals, GC,
    checkpoints, a W&B offline copy, a real SQLite store, and the fetch probe watching the
    training thread."""
    import shutil

    from evals.data_convert import convert_original
    from monitor.store import open_store
    from trainer.config import EvalConfig

    tmp = tmp_path_factory.mktemp("clean")
    (tmp / "benchmarks" / "arc").mkdir(parents=True)
    shutil.copy(shared_data / "evals" / "arc" / "ARC-Easy-Dev.jsonl", tmp / "benchmarks" / "arc")
    convert_original(tmp / "benchmarks", tmp / "eval-data")
    evals = EvalConfig(heldout_every=15, heldout_max_tokens=2_000, downstream_every=TEST_STEPS,
                       downstream_tasks=("arc_easy",), downstream_limit=DOWNSTREAM_LIMIT,
                       downstream_data_dir=str(tmp / "eval-data"))
    config = tiny_config(caches).replace(checkpoint_every=10, gc_every=10, evals=evals)
    url = f"sqlite:///{tmp / 'store.db'}"
    with pytest.MonkeyPatch.context() as patch:
        probe = FetchProbe().install(patch)
        result = run_inprocess(config, tmp, "clean", url, wandb="offline")
    with open_store(url) as store:
        data, info = store.load_run("clean"), store.get_run("clean")
    return CleanRun(config, result, data, info, tmp, probe.violations)


@dataclasses.dataclass
class CleanRun:
    config: TrainConfig
    result: object
    data: object
    info: dict
    tmp: Path
    fetches_in_loop: list


def run_inprocess(config: TrainConfig, tmp_path: Path, name: str, store: str | None, **options):
    opts = RunOptions(run=name, store=store, run_dir=tmp_path / name, console_every=0,
                      monitor=store is not None, **options)
    return train(config, opts)


def cli_env(caches) -> dict[str, str]:
    """Environment of a `gapwatch train` child process: the test's caches, the repo importable."""
    env = dict(os.environ)
    env["JAX_COMPILATION_CACHE_DIR"] = str(caches["jax"])
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["XDG_CACHE_HOME"] = str(caches["xdg"])
    env["PYTHONPATH"] = str(REPO)
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", "train", *args]
