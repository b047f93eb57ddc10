"""Installing the core alone against the full install: time, size on disk and distributions.

Both install the same wheel, built once from this tree, into fresh virtualenvs with the versions of
constraints.txt, from the package index this machine has and pip's cache, one after the other and
alternating, so load on the machine falls on both. `pip install gapwatch` is what a user adds to
their training environment; `gapwatch[all]` is what `make` installs for the trainer, the evals and
parity (the test tools left out of both).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.utils import canonicalize_name

from bench.results import record, table

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {"core": "", "full": "[all]"}
PACKAGES = ("monitor", "app", "evals", "trainer")
# The distributions the extras bring that a user's training environment must not get from the core.
EXTRAS_ONLY = ("jax", "jaxlib", "grain", "orbax-checkpoint", "lm-eval", "datasets", "torch", "transformers")


def build_wheel(out: Path) -> Path:
    source = out / "source"
    # A copy, so that building writes no build/ or egg-info into the checkout.
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out / "dist"),
                    str(source)], check=True)
    return next((out / "dist").glob("gapwatch-*.whl"))


def tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())


def install(wheel: Path, extras: str, venv: Path, compile_pyc: bool) -> dict:
    """One fresh venv with the wheel (and extras) installed: seconds, bytes and distributions."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
           "-c", str(REPO / "constraints.txt"), f"{wheel}{extras}"]
    subprocess.run(cmd + ([] if compile_pyc else ["--no-compile"]), check=True)
    seconds = time.monotonic() - started
    dists = json.loads(subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, json; "
                            "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"],
        capture_output=True, text=True, check=True).stdout)
    site = next((venv / "lib").glob("python*/site-packages"))
    sizes = {p.name: tree_bytes(p) if p.is_dir() else p.stat().st_size for p in site.iterdir()}
    return {"seconds": seconds, "bytes": tree_bytes(venv), "dists": dists, "sizes": sizes}


def largest_additions(core: dict, full: dict, n: int = 8) -> str:
    """The biggest folders of the full install's site-packages that the core does not have."""
    added = sorted(((size, name) for name, size in full["sizes"].items()
                    if name not in core["sizes"] and not name.endswith((".dist-info", ".pth"))), reverse=True)
    return ", ".join(f"{name} {size / 2**20:.0f} MB" for size, name in added[:n])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_install")
    parser.add_argument("--quick", action="store_true", help="one install of each, no byte-compiling")
    args = parser.parse_args(argv)
    repeats, compile_pyc = (1, False) if args.quick else (2, True)
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        tmp = Path(tmp)
        wheel = build_wheel(tmp)
        for i in range(repeats):
            for name, extras in VARIANTS.items():
                venv = tmp / f"{name}-{i}"
                results[name].append(install(wheel, extras, venv, compile_pyc))
                print(f"{name} #{i + 1}: {results[name][-1]['seconds']:.1f} s, "
                      f"{results[name][-1]['bytes'] / 2**20:.0f} MB", flush=True)
                subprocess.run(["rm", "-rf", str(venv)], check=True)
    load_after = os.getloadavg()[0]
    core, full = results["core"][-1], results["full"][-1]
    seconds = {name: statistics.median(r["seconds"] for r in runs) for name, runs in results.items()}
    rows = [{"install": label, "median s": f"{seconds[name]:.1f}",
             "runs s": ", ".join(f"{r['seconds']:.1f}" for r in results[name]),
             "venv MB": f"{results[name][-1]['bytes'] / 2**20:.0f}",
             "distributions": len(results[name][-1]["dists"])}
            for name, label in (("core", "`pip install gapwatch` (core)"), ("full", "`gapwatch[all]`"))]
    core_names = {canonicalize_name(d) for d in core["dists"]}
    present = [d for d in EXTRAS_ONLY if canonicalize_name(d) in core_names]
    body = (table(rows)
            + f"\n\nThe core installs in **{seconds['core'] / seconds['full']:.2f}x** the time of the full install "
              f"and takes **{core['bytes'] / full['bytes']:.2f}x** its disk "
              f"({core['bytes'] / 2**20:.0f} MB against {full['bytes'] / 2**20:.0f} MB); "
              f"{repeats} install{'s' if repeats > 1 else ''} of each, alternating, "
              f"{'with' if compile_pyc else 'without'} byte-compiling, from this machine's package index and pip's cache. "
              f"Of {', '.join(EXTRAS_ONLY)}, the core holds {', '.join(present) or 'none'}. "
              f"The full install's largest additions: "
              f"{largest_additions(core, full)}. Load average {load_before:.1f} before and "
              f"{load_after:.1f} after, on {os.cpu_count()} cores: the seconds are this machine's under that "
              f"load, the ratio is the figure to compare.")
    record("install", "Install: the core alone against the full install", body)


if __name__ == "__main__":
    main()
