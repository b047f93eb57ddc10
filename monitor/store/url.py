"""Which store a command talks to: one URL selects the backend.

`--store URL` wins, then `$GAPWATCH_STORE`, then a SQLite file in the per-user data directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from monitor.errors import GapwatchError

ENV_VAR = "GAPWATCH_STORE"


@dataclass(frozen=True)
class StoreURL:
    url: URL

    @property
    def backend(self) -> str:
        return self.url.get_backend_name()

    @property
    def sqlite_path(self) -> Path | None:
        if self.backend != "sqlite" or not self.url.database or self.url.database == ":memory:":
            return None
        return Path(self.url.database)

    def redacted(self) -> str:
        """The URL for messages, as the user would write it: never shows a password."""
        return self.url.set(drivername=self.backend).render_as_string(hide_password=True)


def default_sqlite_path() -> Path:
    return Path(platformdirs.user_data_dir("gapwatch")) / "gapwatch.db"


def resolve(url: str | None = None) -> StoreURL:
    raw = url or os.environ.get(ENV_VAR) or f"sqlite:///{default_sqlite_path()}"
    if "://" not in raw:
        # A bare path is the most common mistake and the most obvious intent.
        raw = f"sqlite:///{Path(raw).expanduser().resolve()}"
    try:
        parsed = make_url(raw)
    except ArgumentError:
        raise GapwatchError(f"store URL {raw!r} is not a URL (expected sqlite:///PATH or postgresql://HOST/DB)") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        parsed = parsed.set(drivername="sqlite")
    elif backend in ("postgresql", "postgres"):
        # psycopg 3 is the driver we ship; `postgresql://` alone would ask for psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    else:
        raise GapwatchError(
            f"store URL {parsed.render_as_string(hide_password=True)!r} uses {backend!r}; "
            "gapwatch stores are sqlite:///PATH or postgresql://HOST/DB"
        )
    return StoreURL(parsed)
