"""Fixtures for the alerting tests: a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import pytest

from .receiver import Receiver


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()
