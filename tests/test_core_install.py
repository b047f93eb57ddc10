"""The core alone, as a user installs it into their own environment: the wheel built from this tree,
installed into a fresh virtualenv with the tested versions (constraints.txt) from the package index
this machine has, then `gapwatch import`, `detect`, `report` and the `Monitor` client on a real
training log, with neither JAX nor torch nor lm-eval present."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LLMC_LOG = "runs/modded-nanogpt/llmc_gpt2_124M_2024-10-13/main.log"
# What the extras bring and the core must not: distributions, and the modules they would provide.
EXTRA_DISTRIBUTIONS = ("jax", "jaxlib", "optax", "grain", "orbax-checkpoint", "tokenizers", "lm_eval",
                       "datasets", "torch", "transformers", "accelerate", "lightning")
EXTRA_MODULES = ("jax", "optax", "grain", "orbax", "tokenizers", "lm_eval", "datasets", "torch", "transformers",
                 "accelerate", "lightning")
# The trainer integrations import their framework as they load (only a user's script imports them).
INTEGRATIONS = {"monitor.integrations.transformers": "transformers", "monitor.integrations.lightning": "lightning",
                "monitor.integrations.accelerate": "accelerate"}
# The llm.c log's losses, raised by this much after DIVERGE_AT: the client's run leaves its reference.
DIVERGE_AT, OFFSET, LAST_STEP = 2000, 0.3, 4000

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    # The repository must not be on the path: only what the wheel installed counts.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _checked(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
    done = _run(cmd, cwd, timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> Path:
    """The bin/ folder of a fresh virtualenv holding gapwatch's core and nothing else."""
    root = tmp_path_factory.mktemp("core-install")
    source = root / "source"
    # A copy, so that building writes no build/ or egg-info into the working tree.
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("monitor", "app", "evals", "trainer"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    # The pip of the running environment does the work, with its cache; the new venv needs none.
    _checked([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(root / "dist"),
              str(source)], root)
    wheel = next((root / "dist").glob("gapwatch-*.whl"))
    _checked([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], root)
    bin_dir = root / "venv" / "bin"
    # --no-compile: byte-compiling every installed module would be most of the install time.
    _checked([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--quiet",
              "--no-compile", "-c", str(REPO / "constraints.txt"), str(wheel)], root, timeout=600)
    return bin_dir


def test_the_core_installs_without_the_extras(core, tmp_path):
    probe = ("import importlib.metadata as m, importlib.util as u, json, monitor; print(json.dumps({"
             f"'dists': [d for d in {EXTRA_DISTRIBUTIONS!r} if any(True for _ in m.distributions(name=d))], "
             f"'modules': [n for n in {EXTRA_MODULES!r} if u.find_spec(n)], "
             "'monitor': monitor.__file__, 'numpy': m.version('numpy')}))")
    found = json.loads(_checked([str(core / "python"), "-c", probe], tmp_path))
    assert found["dists"] == [] and found["modules"] == []
    assert found["monitor"].startswith(str(core.parent))  # the installed copy, not the repository
    assert f"numpy=={found['numpy']}\n" in (REPO / "constraints.txt").read_text()


def test_every_core_module_imports(core, tmp_path):
    # `app.__main__` runs the CLI when imported: `gapwatch --help` stands for it in the other tests.
    probe = ("import importlib, pkgutil, monitor, app\n"
             "names = [m.name for p in (monitor, app) for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')\n"
             f"         if not m.name.endswith('.__main__') and m.name not in {sorted(INTEGRATIONS)!r}]\n"
             "for name in names:\n    importlib.import_module(name)\n"
             "print(len(names))\n")
    assert int(_checked([str(core / "python"), "-c", probe], tmp_path)) > 50


def test_an_integration_without_its_framework_says_which_extra_to_install(core, tmp_path):
    for module, extra in INTEGRATIONS.items():
        done = _run([str(core / "python"), "-c", f"import {module}"], tmp_path)
        assert done.returncode == 1
        assert done.stderr.rstrip().splitlines()[-1].endswith(f"pip install 'gapwatch[{extra}]'")


def test_import_detect_report_and_the_client_on_a_real_log(core, tmp_path, shared_data):
    log = shared_data / LLMC_LOG
    store = f"sqlite:///{tmp_path / 'store.db'}"
    gapwatch = str(core / "gapwatch")
    imported = _run([gapwatch, "import", str(log), "--run", "llmc-ref", "--store", store], tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert "created run 'llmc-ref'" in " ".join((imported.stdout + imported.stderr).split())

    # The logging client in a user's loop: the same losses, raised after DIVERGE_AT.
    client = tmp_path / "train_loop.py"
    client.write_text(
        "import re, sys\nfrom monitor.client import Monitor\n"
        "with Monitor('client-run', sys.argv[2], reference='llmc-ref', flush_interval_s=0.2) as mon:\n"
        "    for line in open(sys.argv[1]):\n"
        "        m = re.match(r's:(\\d+) trl:([\\d.]+)', line)\n"
        f"        if m and int(m[1]) <= {LAST_STEP}:\n"
        f"            mon.log(int(m[1]), {{'train/loss': float(m[2]) + ({OFFSET} if int(m[1]) > {DIVERGE_AT} else 0)}})\n")
    _checked([str(core / "python"), str(client), str(log), store], tmp_path)

    detections = json.loads(_checked([gapwatch, "detect", "--run", "client-run", "--store", store, "--json"],
                                     tmp_path))
    divergence = [d for d in detections if d["detector"] == "reference_divergence"]
    assert divergence and divergence[0]["metric"] == "train/loss"
    assert DIVERGE_AT - 50 <= divergence[0]["start_step"] <= DIVERGE_AT + 50

    report = tmp_path / "report.html"
    _checked([gapwatch, "report", "--run", "client-run", "--store", store, "-o", str(report)], tmp_path)
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "llmc-ref" in html and "Diverged above the reference" in html


def test_a_command_of_a_missing_extra_says_which_to_install(core, tmp_path):
    done = _run([str(core / "gapwatch"), "train", "--steps", "1"], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("gapwatch train: error: needs the trainer extra (jax, ")
    assert done.stderr.rstrip().endswith("pip install 'gapwatch[trainer]'")
