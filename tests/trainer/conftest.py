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
