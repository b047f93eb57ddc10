"""The store: SQLite (embedded default) or PostgreSQL (many writers), selected by one URL."""

from monitor.store.errors import DatabaseError, StoreError, describe_db_error
from monitor.store.increments import KeyRange, RunMarks
from monitor.store.leases import LeaseLost
from monitor.store.run_frames import KeyRows, run_data
from monitor.store.store import Store, open_store
from monitor.store.database import ENV_VAR, resolve

__all__ = ["ENV_VAR", "DatabaseError", "KeyRange", "KeyRows", "LeaseLost", "RunMarks", "Store", "StoreError",
           "describe_db_error", "open_store", "resolve", "run_data"]
