"""Where our lm-eval task configs (evals/tasks/) get their documents: the local data layout.

lm-eval calls `custom_dataset(**task_metadata, **dataset_kwargs)`; the data directory (and the
`limit` subset) reach it as task metadata that evals/task_suite.py gives the TaskManager, and the
task's folder comes from its YAML's `dataset_kwargs`.

The `limit` subset is taken here, before lm-eval sees the documents, rather than through lm-eval's
`samples` argument: lm-eval walks every document of a split several times per evaluation (10,042
for HellaSwag), which for an in-loop eval of 50 documents costs far more than scoring them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import collections
import hashlib

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
from datasets.table import InMemoryTable

from monitor.errors import GapwatchError

from evals.data_layout import FETCH_HINT

DATA_DIR_METADATA = "gapwatch_data_dir"
LIMIT_METADATA = "gapwatch_limit"
SEED_METADATA = "gapwatch_subset_seed"
FEWSHOT_SPLIT = "dev"  # MMLU's few-shot pool: kept whole, it is not what is evaluated


def subset_indices(n_docs: int, limit: int | None, seed: int) -> list[int] | None:
    """A sorted, seeded sample of `limit` document indices; None means every document."""
    if limit is None or limit >= n_docs:
        return None
    if limit <= 0:
        raise GapwatchError(f"limit must be positive, not {limit}")
    rng = np.random.default_rng(seed)  # a private generator: global RNG state is left alone
    return sorted(int(i) for i in rng.choice(n_docs, size=limit, replace=False))


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
    limit, seed = metadata.get(LIMIT_METADATA), metadata.get(SEED_METADATA)
    out = {}
    for path in splits:
        split = _read_split(path)
        keep = None if path.stem == FEWSHOT_SPLIT else subset_indices(len(split), limit, seed)
        out[path.stem] = split if keep is None else split.select(keep)
    return datasets.DatasetDict(out)


def _read_split(path: Path) -> datasets.Dataset:
    try:
        table = pa_json.read_json(path)
    except pa.ArrowInvalid as exc:
        raise GapwatchError(f"{path}: not a JSON-lines file of one table ({exc})") from None
    # The fingerprint names the file version, so datasets' own caching keys stay unique and cheap.
    stat = path.stat()
    fingerprint = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return datasets.Dataset(InMemoryTable(table), fingerprint=fingerprint.hexdigest()[:16])


# lm-eval calls a task's `process_docs` every time it asks for the documents (eight times per
# HellaSwag evaluation), and `datasets` caches `map` results only for datasets backed by files in
# its cache, which ours (in memory) are not. Keyed by the input's fingerprint, which names the
# file version (see _read_split), the work is done once per process: a trainer evaluating every
# few hundred steps pays it at its first evaluation only.
_PROCESSED_CAPACITY = 16  # datasets kept: all our tasks' documents, a few versions each
_processed: collections.OrderedDict[tuple[str, str], datasets.Dataset] = collections.OrderedDict()


def _memoized(process_docs, dataset: datasets.Dataset) -> datasets.Dataset:
    key = (f"{process_docs.__module__}.{process_docs.__qualname__}", dataset._fingerprint)
    if key not in _processed:
        _processed[key] = process_docs(dataset)
        if len(_processed) > _PROCESSED_CAPACITY:
            _processed.popitem(last=False)
    _processed.move_to_end(key)
    return _processed[key]


def hellaswag_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """lm-eval's own HellaSwag `process_docs`, done once per file version."""
    from lm_eval.tasks.hellaswag.utils import process_docs

    return _memoized(process_docs, dataset)
