"""Running `gapwatch import` on each fuzz case in a process of its own, and judging the outcome.

A worker process (`python -m bench.fuzz_runner`) imports the importers once, then forks a child
per case: a segfault kills only the child (a crash), a child past its time is killed (a hang),
and starting a case costs a fork instead of a Python start-up. The worker itself never runs an
importer, so it has no threads when it forks.

Outcomes: `clean error` (exit 2, the last stderr line the one error line, no traceback),
`imported` (exit 0, nothing the input does not hold), `silent change` (exit 0 with a value, step
or name the input never had, or fewer rows than a checksummed file holds with no note),
`traceback`, `crash` (killed by a signal), `hang`, `other` (any other exit or error shape).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.fuzz_corpus import Case, Oracle

OUTCOMES = ("clean error", "imported", "silent change", "traceback", "crash", "hang", "other")
ERROR_PREFIX = "gapwatch import: error: "


@dataclass
class Result:
    case: str
    outcome: str
    detail: str


class Worker:
    """The forking worker, driven over its stdin and stdout (one JSON line each way per case).

    tree: the source tree whose gapwatch it imports with (default: this one); the worker is this
    file run as a script, so it needs nothing of `bench` in that tree."""

    def __init__(self, tree: Path | None = None) -> None:
        root = str(tree or Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": root}
        self._proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=env, cwd=root)

    def run(self, argv: list[str], stderr_path: Path, timeout_s: float) -> tuple[int, bool]:
        """(exit status, or minus the signal that killed it; whether it ran past timeout_s)."""
        self._proc.stdin.write(json.dumps({"argv": argv, "stderr": str(stderr_path), "timeout": timeout_s}) + "\n")
        self._proc.stdin.flush()
        answer = json.loads(self._proc.stdout.readline())
        return answer["rc"], answer["timed_out"]

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=60)


def run_cases(cases: list[Case], timeout_s: float = 120.0, progress=None, tree: Path | None = None) -> list[Result]:
    worker = Worker(tree)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="gapwatch-fuzz-") as tmp:
            for i, case in enumerate(cases):
                folder = Path(tmp) / str(i)
                folder.mkdir()
                source = folder / case.filename
                source.write_bytes(case.data)
                url = f"sqlite:///{folder / 'store.db'}"
                argv = ["import", str(source), "--run", "r", "--store", url, *case.args]
                started = time.monotonic()
                rc, timed_out = worker.run(argv, folder / "stderr", timeout_s)
                stderr = (folder / "stderr").read_text(errors="replace")
                results.append(judge(case, rc, timed_out, stderr, url))
                if progress is not None:
                    progress(i + 1, len(cases), results[-1], time.monotonic() - started)
    finally:
        worker.close()
    return results


def judge(case: Case, rc: int, timed_out: bool, stderr: str, url: str) -> Result:
    lines = stderr.strip().splitlines()
    last = lines[-1] if lines else ""
    if timed_out:
        return Result(case.name, "hang", "")
    if rc < 0:
        return Result(case.name, "crash", signal.Signals(-rc).name)
    if "Traceback" in stderr:
        return Result(case.name, "traceback", last[:200])
    if rc == 2:
        errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
        if len(errors) == 1 and last == errors[0] and len(last) < 1000:
            return Result(case.name, "clean error", last[len(ERROR_PREFIX):][:200])
        return Result(case.name, "other", f"exit 2 with {len(errors)} error lines: {last[:200]}")
    if rc != 0:
        return Result(case.name, "other", f"exit {rc}: {last[:200]}")
    change = silent_change(case.oracle, url, noted="note:" in stderr)
    return Result(case.name, "silent change" if change else "imported", change or "")


def stored_rows(url: str) -> set[tuple[int, str, float]]:
    """Every (step, key, value) the import stored, non-finite values included."""
    from monitor.store import open_store

    with open_store(url, read_only=True) as store:
        run = store.load_run("r")
    wide = run.scalars
    rows = {(int(step), str(key), float(value)) for key in wide.columns
            for step, value in wide[key].items() if not math.isnan(value)}
    for key, step, value in run.logged_nonfinite[["key", "step", "value"]].itertuples(index=False):
        rows.add((int(step), str(key), float(value)))
    return rows


def silent_change(oracle: Oracle, url: str, noted: bool) -> str | None:
    """What an import that succeeded stored that the input does not hold; None if nothing."""
    rows = stored_rows(url)
    if not rows:
        return "imported a run with no values"
    if oracle.exact is not None:
        if _canonical(rows) != _canonical(oracle.exact):
            return f"stored {len(rows)} rows, not the input's {len(oracle.exact)}"
        return None
    known = oracle.values if oracle.values is not None else oracle.numbers
    any_nan = any(math.isnan(n) for n in known)
    for step, key, value in sorted(rows, key=str):
        if not (value in known or (math.isnan(value) and any_nan)):
            return f"{key} at step {step}: {value!r} is no number of the input"
        if oracle.steps is not None and step not in oracle.steps:
            return f"step {step} is no number of the input"
        if oracle.names is not None and not all(part in oracle.names for part in key.split("/")):
            return f"metric {key[:80]!r} is no name of the input"
    if oracle.rows is not None and len(rows) < oracle.rows and not noted:
        return f"{len(rows)} of {oracle.rows} rows stored, with no note"
    return None


def _canonical(rows) -> set:
    return {(s, k, "nan" if math.isnan(v) else v) for s, k, v in rows}


def original_oracles(paths: list[Path]) -> dict[Path, Oracle]:
    """What a clean import of each checksummed file stores: its values and row count."""
    from bench.fuzz_corpus import Oracle

    out = {}
    worker = Worker()
    try:
        with tempfile.TemporaryDirectory(prefix="gapwatch-fuzz-") as tmp:
            for i, path in enumerate(paths):
                url = f"sqlite:///{Path(tmp) / f'{i}.db'}"
                rc, _ = worker.run(["import", str(path), "--run", "r", "--store", url], Path(tmp) / "stderr", 600)
                if rc != 0:
                    raise RuntimeError(f"{path}: the clean file does not import ({rc})")
                rows = stored_rows(url)
                out[path] = Oracle(values={v for _, _, v in rows}, rows=len(rows))
    finally:
        worker.close()
    return out


# --- the worker ------------------------------------------------------------------------------------
def _serve() -> None:
    from app.cli import main
    from monitor import importers  # noqa: F401 - imported once here, not in every child
    from monitor.importers import lm_eval_json, table_stream, tensorboard_events, text_logs  # noqa: F401
    from monitor.importers.wandb import csv_export, run_file  # noqa: F401
    from monitor.store import open_store  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            code = 1
            try:
                code = main(request["argv"])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # noqa: BLE001 - the traceback is what the judge looks for
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        rc, timed_out = _wait(pid, request["timeout"])
        sys.stdout.write(json.dumps({"rc": rc, "timed_out": timed_out}) + "\n")
        sys.stdout.flush()


def _wait(pid: int, timeout_s: float) -> tuple[int, bool]:
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL, True
        time.sleep(0.005)


if __name__ == "__main__":
    _serve()
