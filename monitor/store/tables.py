"""The store's tables (SQLAlchemy Core). Times are float seconds since the epoch, JSON is text.

Metric values: NULL means NaN. SQLite silently turns a bound NaN into NULL, so both backends use that
one convention; +/-Inf are stored as themselves.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

meta = Table(
    "gapwatch_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("project", String(255)),
    Column("source", String(64), nullable=False),
    Column("config", Text, nullable=False, default="{}"),
    Column("tokens_per_step", Float),
    Column("reference", String(255)),
    Column("status", String(32), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

metric_keys = Table(
    "metric_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False, unique=True),
)

# One row per (run, key, step, attempt) of the write tail (see metric_chunks). A step logged again
# after a restart keeps both attempts; readers take the highest attempt. No rowid on SQLite: the
# primary key is the clustered order, so a range of steps of one series is one contiguous read.
metrics = Table(
    "metrics",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key_id", Integer, primary_key=True),
    Column("step", BigInteger, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("value", Float),
    Column("wall_time", Float, nullable=False),
    sqlite_with_rowid=False,
)

# Sealed step ranges of each series, one row per (run, key, chunk of CHUNK_STEPS steps): the
# compressed columns of every row the range holds (see chunks.py). The row table keeps the rest.
# A rowid table on SQLite: rows of several kilobytes do not belong in a clustered B-tree.
metric_chunks = Table(
    "metric_chunks",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key_id", Integer, primary_key=True),
    Column("chunk", BigInteger, primary_key=True),
    Column("n", Integer, nullable=False),
    Column("n_steps", Integer, nullable=False),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("max_wall_time", Float, nullable=False),
    Column("step_data", LargeBinary, nullable=False),
    Column("attempt_data", LargeBinary, nullable=False),
    Column("value_data", LargeBinary, nullable=False),
    Column("wall_time_data", LargeBinary, nullable=False),
)

# Per-series high-water marks: last step and row count, kept with every write. They tell the writer
# whether a batch only appends (cheap incremental rollups) and give the overview its "last step".
series = Table(
    "series",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key_id", Integer, primary_key=True),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("n", BigInteger, nullable=False),
    Column("last_wall_time", Float, nullable=False),
    sqlite_with_rowid=False,
)

# Series a detector derives from a run (spike scores), apart from what the run logged: a run's
# rows, its export and its logged views are what the trainer logged. One value per (run, key, step);
# judging again overwrites it.
derived_points = Table(
    "derived_points",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key_id", Integer, primary_key=True),
    Column("step", BigInteger, primary_key=True),
    Column("value", Float),
    sqlite_with_rowid=False,
)

# Min/max/mean/last per bucket of `width(level)` steps, for reads under a point budget.
rollups = Table(
    "rollups",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("key_id", Integer, primary_key=True),
    Column("level", SmallInteger, primary_key=True),
    Column("bucket", BigInteger, primary_key=True),
    Column("n", Integer, nullable=False),
    Column("nonfinite", Integer, nullable=False),
    Column("total", Float),
    Column("min_step", BigInteger),
    Column("min_value", Float),
    Column("max_step", BigInteger),
    Column("max_value", Float),
    Column("last_step", BigInteger, nullable=False),
    Column("last_value", Float),
    sqlite_with_rowid=False,
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("kind", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("wall_time", Float, nullable=False),
    # Hash of (kind, step, attempt, payload): writing the same event twice stores it once.
    Column("dedup_key", String(64), nullable=False),
    UniqueConstraint("run_id", "dedup_key", name="uq_events_dedup"),
    Index("ix_events_run_step", "run_id", "step"),
)

detections = Table(
    "detections",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, nullable=False),
    Column("detector", String(64), nullable=False),
    Column("metric", String(255), nullable=False),
    Column("start_step", BigInteger, nullable=False),
    Column("end_step", BigInteger, nullable=False),
    Column("peak_step", BigInteger, nullable=False),
    Column("score", Float),
    Column("severity", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("evidence", Text, nullable=False),
    Column("reference", String(255)),
    Column("attempt", Integer),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("known_step", BigInteger),
    UniqueConstraint("run_id", "detector", "metric", "start_step", name="uq_detections_interval"),
)

# One row per incident: (run, story), opened, updated while it lasts, resolved; `members` holds the
# findings of each detector that joined it (JSON), `detector`/`metric` those of the one naming it.
alerts = Table(
    "alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, nullable=False),
    Column("attempt", Integer, nullable=False, default=0),
    Column("detector", String(64), nullable=False),
    Column("metric", String(255), nullable=False),
    Column("state", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("start_step", BigInteger, nullable=False),
    Column("end_step", BigInteger, nullable=False),
    Column("peak_step", BigInteger, nullable=False),
    Column("score", Float),
    Column("message", Text, nullable=False),
    Column("evidence", Text, nullable=False),
    Column("opened_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("resolved_at", Float),
    Column("story", String(64)),
    Column("members", Text),
    Index("ix_alerts_incident", "run_id", "attempt", "detector", "metric", "state"),
)

# Every notification is written here first, in the same transaction as the alert change, and a
# delivery loop sends it; `dedup_key` makes a second write of the same notification a no-op.
alert_outbox = Table(
    "alert_outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", Integer, nullable=False),
    Column("sink", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("payload", Text, nullable=False),
    Column("dedup_key", String(128), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("tries", Integer, nullable=False, default=0),
    Column("next_try_at", Float, nullable=False),
    Column("delivered_at", Float),
    Column("last_error", Text),
    # Where the receiver keeps the delivered message (a Slack message's channel and ts, as JSON),
    # for a sink that edits one message per incident; null for a receiver that says nothing back.
    Column("message_ref", Text),
    Index("ix_outbox_pending", "delivered_at", "next_try_at"),
)

# Leases of the watch workers that share a store (see leases.py): `run/<id>` for a run being
# judged, `worker/<owner>` for a live worker, `store` for SQLite's single worker.
watch_leases = Table(
    "watch_leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(255), nullable=False),
    Column("expires_at", Float, nullable=False),
)

# Serialised state of long-running services (the watch service's online detectors).
service_state = Table(
    "service_state",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("payload", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)
