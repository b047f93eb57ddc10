"""Serving the dashboard with waitress, and the rule that keeps it private by default."""

from __future__ import annotations

import ipaddress

from dash import Dash
from waitress import create_server
from waitress.server import BaseWSGIServer

from app.dashboard.app import create_app
from app.dashboard.auth import ENV_PASSWORD, ENV_TOKEN, MIN_SECRET_LENGTH, AuthConfig
from app.dashboard.config import DashboardConfig
from monitor.errors import GapwatchError
from monitor.store import open_store


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        # A host name other than localhost may resolve to anything: treat it as public.
        return False


def check_bind(host: str, auth: AuthConfig) -> None:
    """Refuse to expose the dashboard beyond this machine without authentication."""
    weak = auth.weak_secret()
    if weak:
        raise GapwatchError(f"{weak} is shorter than {MIN_SECRET_LENGTH} characters; use a longer secret")
    if not is_loopback(host) and not auth.enabled:
        raise GapwatchError(
            f"refusing to serve on {host} without authentication: set {ENV_PASSWORD} (basic auth) or "
            f"{ENV_TOKEN} (bearer token), or bind 127.0.0.1"
        )


def open_app(config: DashboardConfig, auth: AuthConfig) -> Dash:
    """The dashboard app over the configured store, after the bind rule has passed."""
    check_bind(config.host, auth)
    # Read-only: the dashboard must never be able to change what the trainer and detectors wrote.
    store = open_store(config.store_url, read_only=True)
    return create_app(store, config, auth)


def make_server(app: Dash, config: DashboardConfig) -> BaseWSGIServer:
    """A bound waitress server for the app (call `.run()` to serve, `.close()` to stop)."""
    try:
        return create_server(app.server, host=config.host, port=config.port, threads=config.threads,
                             ident="gapwatch")
    except OSError as exc:
        raise GapwatchError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
