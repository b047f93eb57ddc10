"""Chunks of 64 steps in every store these tests make, so that runs of a few hundred steps already
keep most of their rows sealed in chunks and only a tail in the row table (see
monitor/store/chunks.py): every store behaviour is then tested across both places."""

from __future__ import annotations

import pytest

from monitor.store import chunks

TEST_CHUNK_STEPS = 64


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(chunks, "CHUNK_STEPS", TEST_CHUNK_STEPS)
