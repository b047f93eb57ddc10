"""Downstream evals: lm-eval's own tasks on local data, results as plain numbers with error bars.

In a training loop this must be repeatable and harmless: `limit` picks the same seeded subset of
documents every time (spread over the whole split, not its first rows, which for HellaSwag all come
from one source), and the trainer's randomness must not change. lm-eval's `simple_evaluate` reseeds
Python's, NumPy's and torch's global generators unless each seed is passed as None, and it imports
torch and runs subprocesses to record the environment (seconds per call). So we call the
`evaluate` it wraps, apply the two task settings it would (few-shot count and few-shot seed), and
restore the global generators afterwards, because lm-eval also draws random ids from `random`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from monitor.errors import GapwatchError

from evals.data_layout import default_data_dir
from evals.harness import HarnessConfig, ScoringLM
from evals.protocols import LogitsFn, Tokenizer, TokenScorer
from evals.task_suite import TASKS, check_task_names, task_manager

METRICS = ("acc", "acc_norm")


@dataclass(frozen=True)
class DownstreamConfig:
    limit: int | None = None
    """Documents per task (per MMLU subject); None scores every document."""
    subset_seed: int = 1234
    """Seed of the `limit` subset (OLMo's evals use 1234 as their random_subsample_seed)."""
    num_fewshot: int | None = None
    """Few-shot examples; None keeps each task's default (0 for all of ours)."""
    fewshot_seed: int = 1234
    """Seed of lm-eval's few-shot sampler (its own generator; lm-eval's default value)."""
    bootstrap_iters: int = 1000
    """lm-eval computes no stderr at all with 0; acc/acc_norm use the closed form regardless."""
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    """Batching and context length of the model wrapper."""


@dataclass
class DownstreamResult:
    task: str
    metric: str
    """acc or acc_norm"""
    value: float
    stderr: float
    n: int
    """Documents scored."""


@dataclass
class DownstreamRun:
    results: list[DownstreamResult]
    raw: dict[str, Any]
    """lm-eval's own results dictionary (JSON-safe), for saving beside the run."""


class _DropNotice(logging.Filter):
    """lm-eval warns once per task that uses `custom_dataset` (all of ours): 57 lines for MMLU."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()


@contextlib.contextmanager
def _quiet_lm_eval() -> Iterator[None]:
    import datasets

    task_logger = logging.getLogger("lm_eval.api.task")
    notice = _DropNotice()
    task_logger.addFilter(notice)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a bar per `map` over every task's documents
    try:
        yield
    finally:
        task_logger.removeFilter(notice)
        if bars:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def _preserve_global_rngs() -> Iterator[None]:
    """Python's, NumPy's and (if loaded) torch's global generators leave as they came in."""
    py_state, np_state = random.getstate(), np.random.get_state()
    torch = sys.modules.get("torch")
    torch_state = torch.get_rng_state() if torch is not None else None
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        if torch is not None:
            torch.set_rng_state(torch_state)


def _number(value: Any) -> float:
    """lm-eval reports NumPy floats, and the string 'N/A' where it has no stderr."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return repr(obj)


def _leaf_names(loaded: dict, name: str) -> list[str]:
    group = loaded["groups"].get(name)
    if group is None:
        return [name]
    return [t.task_name for t in group.get_all_tasks()]


def parse_results(raw: dict, tasks: Sequence[str], leaves: dict[str, list[str]]
                  ) -> list[DownstreamResult]:
    out = []
    for task in tasks:
        row = raw["results"].get(task, {})
        n = sum(int(raw["n-samples"][leaf]["effective"]) for leaf in leaves[task])
        for metric in METRICS:
            if f"{metric},none" in row:
                out.append(DownstreamResult(
                    task=task, metric=metric, value=_number(row[f"{metric},none"]),
                    stderr=_number(row.get(f"{metric}_stderr,none")), n=n))
    return out


def run_tasks(
    model: LogitsFn | TokenScorer | ScoringLM,
    tokenizer: Tokenizer | None = None,
    tasks: Sequence[str] = TASKS,
    *,
    data_dir: Path | None = None,
    config: DownstreamConfig = DownstreamConfig(),
    log_samples: bool = False,
) -> DownstreamRun:
    """Run lm-eval's tasks on `model` and return acc/acc_norm with stderr and n per task."""
    from lm_eval.evaluator import evaluate

    tasks = check_task_names(list(tasks))
    if isinstance(model, ScoringLM):
        lm = model
    elif tokenizer is None:
        raise GapwatchError("run_tasks: a scoring function needs its tokenizer")
    else:
        lm = ScoringLM(model, tokenizer, config.harness)
    if config.limit is not None and config.limit <= 0:
        raise GapwatchError(f"limit must be positive, not {config.limit}")
    with (_preserve_global_rngs(), _quiet_lm_eval(),
          task_manager(data_dir or default_data_dir(), config.limit, config.subset_seed) as manager):
        loaded = manager.load(tasks)
        leaves = {name: _leaf_names(loaded, name) for name in tasks}
        for task in loaded["tasks"].values():
            # What simple_evaluate does per task: a default of 0 shots, the seeded shot sampler.
            if config.num_fewshot is not None:
                task.set_config(key="num_fewshot", value=config.num_fewshot)
            elif task.get_config("num_fewshot") is None:
                task.set_config(key="num_fewshot", value=0)
            task.set_fewshot_seed(seed=config.fewshot_seed)
        raw = evaluate(lm=lm, task_dict=loaded, bootstrap_iters=config.bootstrap_iters,
                       log_samples=log_samples)
    return DownstreamRun(results=parse_results(raw, tasks, leaves), raw=_json_safe(raw))
