"""Fixtures for the evals tests: real benchmark files (../shared/data/evals) in the local layout,
cut to their first rows so every task loads in well under a second, and a real bigram model."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.data_convert import convert_original
from evals.ngram import BigramModel
from evals.tokenizer import ByteTokenizer

ROWS_PER_FILE = 120  # enough for seeded --limit subsets of 20-40 documents per task


@pytest.fixture(scope="session")
def eval_data_dir(tmp_path_factory, shared_data) -> Path:
    data_dir = tmp_path_factory.mktemp("eval-data")
    convert_original(shared_data / "evals", data_dir)
    for path in (data_dir / "tasks").rglob("*.jsonl"):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        path.write_text("".join(lines[:ROWS_PER_FILE]), encoding="utf-8")
    return data_dir


@pytest.fixture(scope="session")
def byte_tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


@pytest.fixture(scope="session")
def bigram(byte_tokenizer, shared_data) -> BigramModel:
    """A byte bigram model fit on WikiText-2 test: far better than uniform on English text."""
    text = (shared_data / "text/wikitext-2/test.txt").read_text(encoding="utf-8")
    return BigramModel.fit([text], byte_tokenizer)
