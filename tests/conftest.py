"""Fixtures shared by the whole suite: real SQLite files and real PostgreSQL databases."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg
import pytest

from bench.real_data import REAL_DATA

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REAL_DATA
PG_ADMIN_URL = os.environ.get("GAPWATCH_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
# Debian's Chromium, headless, never a downloaded browser; no background traffic on a closed network.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def pytest_collection_modifyitems(config, items):
    """Files that hold a slow test run first, each file's tests in their order: `make test`'s two
    workers then end together, instead of one running a long file alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real training logs and benchmark data (SHARED_DATA)."""
    assert SHARED_DATA.is_dir(), f"test data missing at {SHARED_DATA}"
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Keep every test away from the real per-user data, cache and config directories."""
    home = tmp_path_factory.mktemp("home")
    for var in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.delenv("GAPWATCH_STORE", raising=False)
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def pg_url():
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    name = f"gapwatch_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request) -> str:
    """Each test that takes this runs once per backend, against the real thing."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for the whole session. Playwright's sync API allows one driver per
    process at a time, so every browser test shares this one (each opens its own context)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is required: apt-get install -y chromium chromium-driver"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
