"""Real W&B offline runs for the importer tests, written once per session by the wandb package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WRITER = Path(__file__).with_name("wandb_writer.py")
# Generous: wandb starts its core service on first use (a few seconds on a busy 2-core machine).
WRITER_TIMEOUT_S = 180


def run_writer(root: Path, kind: str, steps: int | str, wait: bool = True, *more: str):
    root.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(WRITER), str(root), kind, str(steps), *more]
    # Everything wandb writes (settings, caches) stays under the test's folder.
    env = {**os.environ, "WANDB_DIR": str(root), "WANDB_CACHE_DIR": str(root / "cache"),
           "WANDB_CONFIG_DIR": str(root / "config"), "WANDB_DATA_DIR": str(root / "data")}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    done = subprocess.run(cmd, capture_output=True, timeout=WRITER_TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return None


def offline_run_dir(root: Path) -> Path:
    (run,) = [p for p in (root / "wandb").iterdir() if p.name.startswith("offline-run-")]
    return run


@pytest.fixture(scope="session")
def rich_run(tmp_path_factory) -> Path:
    """An offline run folder with every kind of value (see wandb_writer.rich), 60 steps."""
    root = tmp_path_factory.mktemp("wandb_rich")
    run_writer(root, "rich", 60)
    return offline_run_dir(root)


CONSOLE_WRITER = Path(__file__).with_name("hf_trainer_console.py")


def trainer_console_log(root: Path, *flags: str) -> tuple[Path, list[dict]]:
    """A real Trainer run (hf_trainer_console.py) with stdout and stderr in root/train.log, and
    what its callbacks saw."""
    import json

    root.mkdir(parents=True)
    log = root / "train.log"
    with open(log, "wb") as out:
        done = subprocess.run([sys.executable, str(CONSOLE_WRITER), str(root), *flags], stdout=out,
                              stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 0, log.read_text()[-2000:]
    return log, json.loads((root / "logged.json").read_text())


@pytest.fixture(scope="session")
def trainer_console(tmp_path_factory):
    """One real Trainer run shared by the tests of what it wrote: its console, ms-swift's log."""
    return trainer_console_log(tmp_path_factory.mktemp("hf") / "bar")
