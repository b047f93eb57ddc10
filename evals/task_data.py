"""Where our lm-eval task configs (evals/tasks/) get their documents: the local data layout.

lm-eval calls `custom_dataset(**task_metadata, **dataset_kwargs)`; the data directory reaches it as
the task metadata `gapwatch_data_dir` that evals/task_suite.py gives the TaskManager, and the
task's folder comes from its YAML's `dataset_kwargs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hashlib

import datasets
import pyarrow as pa
import pyarrow.json as pa_json
from datasets.table import InMemoryTable

from monitor.errors import GapwatchError

from evals.data_layout import FETCH_HINT

DATA_DIR_METADATA = "gapwatch_data_dir"


def load_local_task(task_folder: str, **metadata: Any) -> datasets.DatasetDict:
    """Every `<split>.jsonl` of `<data_dir>/tasks/<task_folder>/` as an in-memory DatasetDict.

    Read with pyarrow into memory on purpose: `datasets.load_dataset("json")` copies each file into
    the Hugging Face cache first and `Dataset.from_list` infers types row by row; both cost more
    than evaluating a small `--limit` subset (MMLU alone has 171 files).
    """
    data_dir = metadata.get(DATA_DIR_METADATA)
    if not data_dir:
        raise GapwatchError(f"task data {task_folder!r}: no {DATA_DIR_METADATA} in the task metadata")
    folder = Path(data_dir) / "tasks" / task_folder
    splits = sorted(folder.glob("*.jsonl"))
    if not splits:
        raise GapwatchError(f"{folder}: no benchmark files; {FETCH_HINT}")
    return datasets.DatasetDict({path.stem: _read_split(path) for path in splits})


def _read_split(path: Path) -> datasets.Dataset:
    try:
        table = pa_json.read_json(path)
    except pa.ArrowInvalid as exc:
        raise GapwatchError(f"{path}: not a JSON-lines file of one table ({exc})") from None
    # The fingerprint names the file version, so datasets' own caching keys stay unique and cheap.
    stat = path.stat()
    fingerprint = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return datasets.Dataset(InMemoryTable(table), fingerprint=fingerprint.hexdigest()[:16])
