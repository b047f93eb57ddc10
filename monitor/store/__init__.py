"""The store: SQLite (embedded default) or PostgreSQL (many writers), selected by one URL."""

from monitor.store.store import Store, open_store
from monitor.store.url import ENV_VAR, resolve

__all__ = ["ENV_VAR", "Store", "open_store", "resolve"]
