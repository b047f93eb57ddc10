"""Fixtures for the evals tests: real benchmark files (the real data's evals/) in the local layout,
cut to their first rows so every task loads in well under a second, and a real bigram model."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.data_convert import convert_original
from evals.ngram import BigramModel
from evals.tokenizer import ByteTokenizer

from checkpoint_worker import run_worker

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


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Path:
    """Two tiny runs of our trainer (seeds 0 and 1), 4 steps, checkpoints at steps 2 and 4,
    trained on 8 virtual devices."""
    root = tmp_path_factory.mktemp("runs")
    run_worker("train", str(root), devices=8, env_dir=root)
    return root
