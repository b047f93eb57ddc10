"""Where training text comes from, as documents, and which documents are held out.

Sources (the `--corpus` value; several may be given):
- `stdlib` (default): the Python installation's own standard library sources, code and docstrings,
  test suites left out, one document per top-level block (module header, function, class). Every
  machine that runs gapwatch has it, with no network and no set-up.
- `stdlib-docstrings`: the docstrings of those same modules, classes and functions, one document
  each: English prose about code, as available offline as `stdlib`, for a model that should
  learn prose rather than code.
- a `.txt` file (documents are its blank-line-separated blocks), a `.jsonl` or `.jsonl.gz` file
  (one JSON object a line, text in `text_field`), or a folder of such files;
- `hf:NAME[:CONFIG][@SPLIT]`: a Hugging Face dataset read with `datasets` in streaming mode, such as
  `hf:allenai/c4:en@validation` for users who have the hub (NAME may also be a local folder).

The held-out split is chosen per document by a hash of its id, so it never depends on the order in
which documents arrive and a held-out document can never leak into training.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from monitor.errors import GapwatchError

STDLIB = "stdlib"
STDLIB_DOCSTRINGS = "stdlib-docstrings"
HF_PREFIX = "hf:"
# Standard-library folders that are test suites or vendored third-party code, not library text.
_STDLIB_SKIP = {"site-packages", "__pycache__", "test", "tests", "idle_test", "lib2to3", "ensurepip"}
# Docstrings shorter than this are one-line summaries ("Return the name."): too little text to be a
# document of their own.
MIN_DOCSTRING_CHARS = 40
_BLANK_LINES = re.compile(r"\n\s*\n")
# A blank line followed by a top-level def, class or decorator starts a new block of a module.
_TOP_LEVEL = re.compile(r"(?<=\n\n)(?=(?:async\s+def|def|class|@)\b)", re.M)


@dataclass(frozen=True)
class Document:
    id: str
    """Stable identity of the document (its path, file+line, or dataset id): decides its split."""
    text: str


def is_heldout(doc_id: str, heldout_fraction: float) -> bool:
    """Deterministic split: the first 8 bytes of SHA-256 of the id, as a fraction of 2^64."""
    h = int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big")
    return h / 2**64 < heldout_fraction


def split_order_key(doc_id: str) -> str:
    """A deterministic pseudo-random order of documents, so a size cap takes a fair sample."""
    return hashlib.sha256(b"order:" + doc_id.encode("utf-8")).hexdigest()


def read_documents(sources: tuple[str, ...], text_field: str = "text",
                   max_hf_documents: int = 100_000) -> Iterator[Document]:
    """Every document of every source, in source order."""
    for source in sources:
        if source == STDLIB:
            yield from _stdlib_documents()
        elif source == STDLIB_DOCSTRINGS:
            yield from _stdlib_docstrings()
        elif source.startswith(HF_PREFIX):
            yield from _hf_documents(source, text_field, max_hf_documents)
        else:
            path = Path(source).expanduser()
            if path.is_dir():
                files = sorted(p for p in path.rglob("*") if p.is_file() and _suffix(p) in _READERS)
                if not files:
                    raise GapwatchError(f"corpus folder {source} holds no .txt or .jsonl files")
                for f in files:
                    yield from _READERS[_suffix(f)](f, text_field)
            elif path.is_file():
                reader = _READERS.get(_suffix(path))
                if reader is None:
                    raise GapwatchError(f"corpus file {source}: only .txt, .jsonl and .jsonl.gz are read")
                yield from reader(path, text_field)
            else:
                raise GapwatchError(f"corpus {source!r} is neither 'stdlib', 'stdlib-docstrings', hf:NAME, "
                                    "a file nor a folder")


def source_signature(sources: tuple[str, ...]) -> list:
    """What a cache must match: file names with sizes and modification times, or dataset names."""
    sig: list = []
    for source in sources:
        if source in (STDLIB, STDLIB_DOCSTRINGS):
            sig.append([source, sys.version, [(str(p), p.stat().st_size) for p in _stdlib_files()]])
        elif source.startswith(HF_PREFIX):
            sig.append(source)
        else:
            path = Path(source).expanduser()
            files = sorted(path.rglob("*")) if path.is_dir() else [path]
            sig.append([(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()])
    return sig


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return ".jsonl.gz" if name.endswith(".jsonl.gz") else path.suffix.lower()


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_files() -> list[Path]:
    root = _stdlib_root()
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in _STDLIB_SKIP]  # never descend into them
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return sorted(found)


def _stdlib_documents() -> Iterator[Document]:
    """One document per top-level block of each module (its header, each function, each class),
    as code corpora cut source files: many small documents from every module make a random sample
    of them, a held-out split of them and each batch alike in kind, where whole files differ a lot."""
    root = _stdlib_root()
    for path in _stdlib_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        name = f"stdlib/{path.relative_to(root).as_posix()}"
        for i, block in enumerate(_TOP_LEVEL.split(text)):
            if block.strip():
                yield Document(f"{name}#{i}", block)


def _stdlib_docstrings() -> Iterator[Document]:
    """The docstring of every module, class and function of the standard library (as `inspect`
    cleans them: indentation removed), module by module; id = module path and line of the owner."""
    root = _stdlib_root()
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            continue  # a file this interpreter cannot parse (another version's syntax) has none to give
        name = f"{STDLIB_DOCSTRINGS}/{path.relative_to(root).as_posix()}"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node)
                if text and len(text) >= MIN_DOCSTRING_CHARS:
                    yield Document(f"{name}#{getattr(node, 'lineno', 0)}", text)


def _txt_documents(path: Path, text_field: str) -> Iterator[Document]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise GapwatchError(f"corpus file {path}: not UTF-8 text (byte {exc.start})") from None
    for i, block in enumerate(_BLANK_LINES.split(text)):
        if block.strip():
            yield Document(f"{path.name}#{i}", block.strip("\n"))


def _jsonl_documents(path: Path, text_field: str) -> Iterator[Document]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise GapwatchError(f"corpus file {path} line {lineno}: malformed JSON ({exc.msg})") from None
                text = row.get(text_field) if isinstance(row, dict) else None
                if not isinstance(text, str):
                    raise GapwatchError(f"corpus file {path} line {lineno}: no string field {text_field!r}")
                doc_id = row.get("id")
                yield Document(f"{path.name}:{doc_id if doc_id is not None else lineno}", text)
    except (OSError, EOFError) as exc:
        raise GapwatchError(f"corpus file {path}: cannot read ({exc})") from None


_READERS = {".txt": _txt_documents, ".jsonl": _jsonl_documents, ".jsonl.gz": _jsonl_documents}


def parse_hf_source(source: str) -> tuple[str, str | None, str]:
    """`hf:NAME[:CONFIG][@SPLIT]` -> (name, config, split); the split defaults to train."""
    spec = source[len(HF_PREFIX):]
    spec, _, split = spec.partition("@")
    name, _, config = spec.partition(":")
    if not name:
        raise GapwatchError(f"corpus {source!r}: expected hf:NAME[:CONFIG][@SPLIT]")
    return name, config or None, split or "train"


def _hf_documents(source: str, text_field: str, max_documents: int) -> Iterator[Document]:
    import datasets

    name, config, split = parse_hf_source(source)
    try:
        stream = datasets.load_dataset(name, config, split=split, streaming=True)
    except Exception as exc:  # noqa: BLE001 - datasets raises many types for a bad name or no network
        raise GapwatchError(f"corpus {source!r}: cannot load ({str(exc).splitlines()[0]})") from None
    for i, row in enumerate(stream):
        if i >= max_documents:
            break
        text = row.get(text_field)
        if not isinstance(text, str):
            raise GapwatchError(f"corpus {source!r} row {i}: no string field {text_field!r}")
        doc_id = row.get("id", row.get("url", i))
        yield Document(f"{name}:{doc_id}", text)
