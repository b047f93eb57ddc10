"""Bad store URLs, unwritable paths and dead servers end in one clear line, fast."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from monitor.errors import GapwatchError
from monitor.store import migrations, open_store


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://root@127.0.0.1/test", "uses 'mysql'"),
        ("sqlite://", "in-memory"),
        ("postgresql://postgres@127.0.0.1:1/test", "cannot open store postgresql://postgres@127.0.0.1:1/test: .*Connection refused"),
        ("postgresql://postgres@127.0.0.1:5432/no_such_database_here", 'database "no_such_database_here" does not exist'),
    ],
)
def test_bad_urls(url, message):
    started = time.monotonic()
    with pytest.raises(GapwatchError, match=message):
        open_store(url)
    assert time.monotonic() - started < 10, "a dead server must be reported fast"


def test_password_is_never_shown():
    with pytest.raises(GapwatchError) as info:
        open_store("postgresql://postgres:hunter2@127.0.0.1:1/test")
    assert "hunter2" not in str(info.value) and "***" in str(info.value)


def test_unwritable_path(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            # root ignores permission bits: a file where a directory is needed fails for anyone.
            blocker = tmp_path / "file"
            blocker.write_text("x")
            target = blocker / "sub" / "store.db"
            with pytest.raises(GapwatchError, match="cannot create the store directory"):
                open_store(f"sqlite:///{target}")
        else:
            with pytest.raises(GapwatchError, match="not writable"):
                open_store(f"sqlite:///{locked / 'store.db'}")
    finally:
        locked.chmod(0o700)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(GapwatchError, match="is not a file"):
        open_store(f"sqlite:///{tmp_path}")


def test_bare_path_means_sqlite(tmp_path):
    store = open_store(str(tmp_path / "plain.db"))
    assert store.backend == "sqlite"
    store.close()


def test_read_only_store_must_exist(tmp_path):
    with pytest.raises(GapwatchError, match="no gapwatch store"):
        open_store(f"sqlite:///{tmp_path / 'missing.db'}", read_only=True)


def test_read_only_store_refuses_writes(sqlite_url):
    open_store(sqlite_url).close()
    store = open_store(sqlite_url, read_only=True)
    with pytest.raises(Exception, match="readonly|read-only"):
        store.ensure_run("r")


def test_newer_schema_is_refused(store_url):
    store = open_store(store_url)
    with store.engine.begin() as conn:
        migrations._set_version(conn, migrations.SCHEMA_VERSION + 1)
    store.close()
    with pytest.raises(GapwatchError, match="newer than this gapwatch"):
        open_store(store_url)


def test_migrations_apply_in_order_once(sqlite_url):
    applied = []
    steps = migrations.MIGRATIONS + [
        (migrations.SCHEMA_VERSION + 1, "test step", lambda conn: applied.append("a")),
        (migrations.SCHEMA_VERSION + 2, "test step", lambda conn: applied.append("b")),
    ]
    store = open_store(sqlite_url)
    with store.engine.begin() as conn:
        assert migrations.upgrade(conn, steps) == migrations.SCHEMA_VERSION + 2
    with store.engine.begin() as conn:
        assert migrations.upgrade(conn, steps) == migrations.SCHEMA_VERSION + 2
    assert applied == ["a", "b"]


def test_cli_prints_one_line_not_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "app", "runs", "--store", "mysql://x/y"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "error: store URL" in result.stderr and "Traceback" not in result.stderr


def test_a_store_from_before_known_steps_keeps_its_detections_and_gains_the_column(store_url):
    from sqlalchemy import text

    from monitor.schema import Detection, Severity

    found = Detection(run="r", detector="spike", metric="train/loss", start_step=10, end_step=30, peak_step=12,
                      score=7.5, severity=Severity.WARNING, message="spike")
    with open_store(store_url) as store:
        store.ensure_run("r")
        store.write_detections([found])
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE detections DROP COLUMN known_step"))
            migrations._set_version(conn, 6)
    with open_store(store_url) as store:
        assert store.schema_version() == migrations.SCHEMA_VERSION >= 7
        (old,) = store.read_detections("r")
        assert old.known_step is None and old.known_at == 30  # taken at its last step, as before
        store.write_detections([Detection(**{**found.__dict__, "start_step": 40, "end_step": 90, "known_step": 50})])
        assert [d.known_at for d in store.read_detections("r")] == [30, 50]
