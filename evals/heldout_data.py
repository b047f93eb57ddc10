"""Held-out sets from plain text, JSON lines, Hugging Face datasets, or the offline default."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

from monitor.errors import GapwatchError

from evals.data_layout import FETCH_HINT, LAMBADA_FILE, default_data_dir
from evals.heldout import HeldoutSet

DEFAULT_SET_NAME = "lambada"


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def load_text_file(path: str | Path, name: str | None = None) -> HeldoutSet:
    """The whole file as one document (no boundaries are invented inside it)."""
    path = Path(path)
    try:
        with _open_text(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        raise GapwatchError(f"{path}: no such file") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise GapwatchError(f"{path}: not readable UTF-8 text ({exc})") from None
    if not text.strip():
        raise GapwatchError(f"{path}: empty")
    return HeldoutSet(name or path.name.split(".")[0], [text])


def load_jsonl(path: str | Path, field: str = "text", name: str | None = None,
               max_documents: int | None = None) -> HeldoutSet:
    """One document per line, from the string `field` of each JSON object (.gz allowed)."""
    path = Path(path)
    docs: list[str] = []
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if max_documents is not None and len(docs) >= max_documents:
                    break
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)[field]
                except json.JSONDecodeError as exc:
                    raise GapwatchError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
                except (KeyError, TypeError):
                    raise GapwatchError(f"{path}:{lineno}: no {field!r} field") from None
                if not isinstance(value, str):
                    raise GapwatchError(f"{path}:{lineno}: {field!r} is not a string")
                docs.append(value)
    except FileNotFoundError:
        raise GapwatchError(f"{path}: no such file") from None
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise GapwatchError(f"{path}: not readable UTF-8 JSON lines ({exc})") from None
    if not docs:
        raise GapwatchError(f"{path}: no documents")
    return HeldoutSet(name or path.name.split(".")[0], docs)


def load_hf_dataset(path: str = "allenai/c4", config: str | None = "en", split: str = "validation",
                    field: str = "text", max_documents: int = 1000, name: str | None = None
                    ) -> HeldoutSet:
    """The first `max_documents` of a Hugging Face dataset, streamed (C4 `en` validation is 40k
    documents in 8 shards; streaming reads only what is used)."""
    import datasets

    label = f"Hugging Face dataset {path}" + (f"/{config}" if config else "") + f" [{split}]"
    try:
        stream = datasets.load_dataset(path, config, split=split, streaming=True)
        rows = list(itertools.islice(stream, max_documents))
    except Exception as exc:  # the hub client raises many types (HTTP, connection, offline mode)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GapwatchError(f"{label}: cannot be read ({type(exc).__name__}: {reason[:200]})") from None
    try:
        docs = [str(row[field]) for row in rows]
    except KeyError:
        raise GapwatchError(f"{label}: rows have no {field!r} field") from None
    if not docs:
        raise GapwatchError(f"{label}: no documents")
    return HeldoutSet(name or f"{path.split('/')[-1]}_{config or 'default'}-{split}", docs)


def default_heldout_set(data_dir: Path | None = None, max_documents: int | None = None) -> HeldoutSet:
    """LAMBADA's 5,153 book passages from the eval-data cache: real prose that exists offline
    once `gapwatch evals fetch-data` has run."""
    path = Path(data_dir or default_data_dir()) / LAMBADA_FILE
    if not path.is_file():
        raise GapwatchError(f"{path}: the default held-out set is missing; {FETCH_HINT}")
    return load_jsonl(path, name=DEFAULT_SET_NAME, max_documents=max_documents)
