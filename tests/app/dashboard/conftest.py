"""Fixtures for the dashboard's unit tests: the demo store of the browser tests, built once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_BUILDER = Path(__file__).resolve().parents[2] / "e2e" / "dashboard_store.py"


def _load_builder():
    spec = importlib.util.spec_from_file_location("dashboard_store", _BUILDER)
    module = importlib.util.module_from_spec(spec)
    # Registered before running it: its dataclasses look their module up by name.
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def demo():
    """The store builder module (build, add_alert)."""
    return _load_builder()


@pytest.fixture(scope="session")
def demo_url(tmp_path_factory, demo) -> str:
    """A SQLite store with a 3,000-step run and its reference; tests only read it."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.db'}"
    demo.build(url, steps=3000)
    return url
