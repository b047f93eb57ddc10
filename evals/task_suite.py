"""An lm-eval TaskManager over our task configs (evals/tasks/) and a local data directory.

Our YAMLs include lm-eval's own task YAMLs by the relative path `../lm_eval_tasks/...`. lm-eval
resolves includes relative to the including file, and the installed lm-eval can live anywhere, so
at run time the configs are copied into a temporary folder beside a link to lm-eval's tasks folder.
Only our folder is indexed (`include_defaults=False`), which takes milliseconds instead of the
seconds that indexing every built-in task costs.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import lm_eval.tasks
from lm_eval.tasks import TaskManager

from monitor.errors import GapwatchError

from evals.data_layout import FETCH_HINT
from evals.task_data import DATA_DIR_METADATA, LIMIT_METADATA, SEED_METADATA

PACKAGED_TASKS = Path(__file__).parent / "tasks"
LM_EVAL_TASKS = Path(lm_eval.tasks.__file__).parent

# The tasks this package configures, in the order they are reported.
TASKS = ("hellaswag", "arc_easy", "arc_challenge", "openbookqa", "piqa", "boolq", "winogrande",
         "mmlu")


@contextlib.contextmanager
def task_manager(data_dir: Path, limit: int | None = None, subset_seed: int = 0
                 ) -> Iterator[TaskManager]:
    """A TaskManager that knows our tasks and reads documents from `data_dir` (kept while open);
    with `limit`, each evaluated split is a seeded subset of that many documents."""
    data_dir = Path(data_dir)
    if not (data_dir / "tasks").is_dir():
        raise GapwatchError(f"{data_dir}: no eval data; {FETCH_HINT}")
    with tempfile.TemporaryDirectory(prefix="gapwatch-tasks-") as tmp:
        (Path(tmp) / "lm_eval_tasks").symlink_to(LM_EVAL_TASKS, target_is_directory=True)
        configs = Path(tmp) / "gapwatch"
        shutil.copytree(PACKAGED_TASKS, configs, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        yield TaskManager(include_path=str(configs), include_defaults=False,
                          metadata={DATA_DIR_METADATA: str(data_dir.resolve()),
                                    LIMIT_METADATA: limit, SEED_METADATA: subset_seed})


def check_task_names(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise GapwatchError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    return names
