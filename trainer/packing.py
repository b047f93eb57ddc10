"""Documents -> tokens -> fixed-length records, train and held-out, cached on disk.

Each document is encoded and followed by the end-of-text token; the documents of a split are
concatenated and cut into records of `seq_len + 1` tokens (inputs are the first `seq_len`, targets
the last `seq_len`), dropping the tail. This is the usual packing of pre-training corpora (OLMo's
numpy datasets do the same, without padding). The result is cached under a key that covers every
input (corpus files and sizes, tokenizer, split, lengths), so a second run starts at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import platformdirs

from monitor.errors import GapwatchError
from trainer import corpus
from trainer.tokenizer import Tokenizer, train_tokenizer

# Bump when the packed layout changes, so old caches are ignored rather than misread.
CACHE_VERSION = 1
ENCODE_CHUNK = 256  # documents per encode_batch call: bounds memory while keeping Rust busy


@dataclass(frozen=True)
class CorpusSpec:
    """What to read and how to cut it (the corpus half of DataConfig)."""

    sources: tuple[str, ...] = (corpus.STDLIB,)
    """Corpus sources: 'stdlib', files, folders or hf:NAME[:CONFIG][@SPLIT] (trainer/corpus.py)."""
    text_field: str = "text"
    """Field holding the text in .jsonl files and datasets."""
    heldout_fraction: float = 0.05
    """Share of documents held out of training, chosen by a hash of the document id."""
    max_train_chars: int | None = None
    """Keep training documents (in a fixed pseudo-random order) up to this many characters."""
    max_heldout_chars: int = 200_000
    """Held-out text kept (each held-out eval scores all of it, so this bounds its cost)."""
    max_hf_documents: int = 100_000
    """Documents read from a streamed Hugging Face dataset."""


@dataclass
class PackedCorpus:
    train: np.ndarray
    """int32 [records, seq_len + 1]: the training split."""
    heldout: list[str]
    """Texts of held-out documents (never trained on), for evals.heldout."""
    tokenizer: Tokenizer
    key: str
    """The cache key: identifies this exact corpus, split and tokenization."""


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("gapwatch")) / "corpora"


def build(spec: CorpusSpec, seq_len: int, vocab_size: int, *, tokenizer: Tokenizer | None = None,
          cache_dir: Path | None = None, say: Callable[[str], None] = print) -> PackedCorpus:
    """Load the packed corpus from the cache, or read, tokenize, pack and cache it.

    With `tokenizer` given (a resumed run's), that tokenizer is used; otherwise one is trained on
    the training split (never on held-out text) with `vocab_size` ids, and cached too. The records'
    cache key covers the tokenizer's content, so a run resumed with its checkpoint's tokenizer
    finds the records it trained on.
    """
    cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
    sources = _sources_key(spec)
    docs: tuple[list[corpus.Document], list[corpus.Document]] | None = None
    if tokenizer is None:
        tokenizer_file = cache_root / "tokenizers" / f"{_hash(sources, vocab_size)}.json"
        if tokenizer_file.exists():
            tokenizer = Tokenizer.load(tokenizer_file)
        else:
            docs = _read(spec, say)
            say(f"tokenizer: training byte-level BPE with {vocab_size:,} ids")
            tokenizer = train_tokenizer((d.text for d in docs[0]), vocab_size)
            tokenizer_file.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(tokenizer_file, tokenizer.to_json())
    if tokenizer.vocab_size > vocab_size:
        raise GapwatchError(
            f"tokenizer has {tokenizer.vocab_size} ids but the model only {vocab_size} embedding rows")
    key = _hash(sources, tokenizer.fingerprint(), seq_len)
    target = cache_root / key
    if (target / "meta.json").exists():
        return _load(target, key)

    train_docs, heldout_docs = docs or _read(spec, say)
    say("packing: tokenizing")
    train = _pack(train_docs, tokenizer, seq_len)
    if len(train) == 0:
        raise GapwatchError(f"corpus {', '.join(spec.sources)}: too little text for one record of "
                            f"{seq_len + 1} tokens")
    say(f"packing: {len(train):,} training records of {seq_len + 1} tokens")
    heldout = [d.text for d in heldout_docs]
    _save(target, train, heldout, tokenizer)
    return PackedCorpus(train, heldout, tokenizer, key)


def _read(spec: CorpusSpec, say: Callable[[str], None]):
    train_docs, heldout_docs = _split(spec)
    if not train_docs:
        raise GapwatchError(f"corpus {', '.join(spec.sources)}: no training documents")
    n_chars = sum(len(d.text) for d in train_docs)
    say(f"corpus: {len(train_docs):,} training documents ({n_chars / 1e6:.1f} M characters), "
        f"{len(heldout_docs):,} held out")
    return train_docs, heldout_docs


def _split(spec: CorpusSpec) -> tuple[list[corpus.Document], list[corpus.Document]]:
    train, heldout = [], []
    for doc in corpus.read_documents(spec.sources, spec.text_field, spec.max_hf_documents):
        (heldout if corpus.is_heldout(doc.id, spec.heldout_fraction) else train).append(doc)
    train.sort(key=lambda d: corpus.split_order_key(d.id))
    heldout.sort(key=lambda d: corpus.split_order_key(d.id))
    return _first_chars(train, spec.max_train_chars), _first_chars(heldout, spec.max_heldout_chars)


def _first_chars(docs: list[corpus.Document], limit: int | None) -> list[corpus.Document]:
    """Documents in order until `limit` characters are reached (the one crossing it included)."""
    if limit is None:
        return docs
    kept, total = [], 0
    for doc in docs:
        if total >= limit:
            break
        kept.append(doc)
        total += len(doc.text)
    return kept


def _pack(docs: list[corpus.Document], tokenizer: Tokenizer, seq_len: int) -> np.ndarray:
    pieces = []
    eot = np.array([tokenizer.eot_token_id], dtype=np.int32)
    for start in range(0, len(docs), ENCODE_CHUNK):
        chunk = docs[start:start + ENCODE_CHUNK]
        for ids in tokenizer.encode_batch([d.text for d in chunk]):
            pieces.append(np.asarray(ids, dtype=np.int32))
            pieces.append(eot)
    stream = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
    width = seq_len + 1
    n = len(stream) // width
    return np.ascontiguousarray(stream[: n * width].reshape(n, width))


def _sources_key(spec: CorpusSpec) -> dict:
    """Everything about the text and its split that a cache entry depends on."""
    return {
        "version": CACHE_VERSION,
        "sources": corpus.source_signature(spec.sources),
        "text_field": spec.text_field,
        "heldout_fraction": spec.heldout_fraction,
        "max_train_chars": spec.max_train_chars,
        "max_heldout_chars": spec.max_heldout_chars,
        "max_hf_documents": spec.max_hf_documents,
    }


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _save(target: Path, train: np.ndarray, heldout: list[str], tokenizer: Tokenizer) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        np.save(tmp / "train.npy", train)
        (tmp / "heldout.json").write_text(json.dumps(heldout), encoding="utf-8")
        tokenizer.save(tmp / "tokenizer.json")
        (tmp / "meta.json").write_text(json.dumps({"train": train.shape, "heldout": len(heldout)}))
        try:
            os.rename(tmp, target)  # atomic: a reader sees the whole cache entry or none
        except OSError:
            if not (target / "meta.json").exists():  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load(target: Path, key: str) -> PackedCorpus:
    try:
        train = np.load(target / "train.npy", mmap_mode="r")
        heldout = json.loads((target / "heldout.json").read_text(encoding="utf-8"))
        tokenizer = Tokenizer.load(target / "tokenizer.json")
    except (OSError, ValueError) as exc:
        raise GapwatchError(f"corpus cache {target} is damaged ({exc}); delete the folder") from None
    return PackedCorpus(np.asarray(train), heldout, tokenizer, key)
