"""Settings of the dashboard server; the `gapwatch dashboard` command fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.run_health import STALE_AFTER_S

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8050


@dataclass(frozen=True)
class DashboardConfig:
    """How the dashboard reads, draws and serves."""

    store_url: str | None = None
    """Store URL; None means $GAPWATCH_STORE, then the per-user SQLite file."""
    host: str = DEFAULT_HOST
    """Address to bind; anything but loopback requires authentication."""
    port: int = DEFAULT_PORT
    """TCP port to listen on."""
    poll_interval_s: float = 2.0
    """Seconds between live polls for new steps; 2 s keeps a busy run's charts current at ~1 query/s."""
    max_points: int = 2000
    """Points per series at the default view: ~2 per pixel of a full-width chart (≈30 KB each)."""
    full_refresh_s: float = 60.0
    """Seconds between full re-renders of a live view, which re-downsample what polling appended."""
    stale_after_s: float = STALE_AFTER_S
    """A running run whose last metric is older than this shows as stale in the overview."""
    threads: int = 8
    """Waitress worker threads: a page load fires a few callbacks at once."""
    title: str = "gapwatch"
    """Browser tab title."""
    detector_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The watch service's detector settings ({detector: {argument: value}}): the thresholds the
    charts draw are the ones the alerts were judged by."""
