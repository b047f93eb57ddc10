"""Authentication in front of every request: HTTP basic auth, or a bearer token.

A token works for machines (`Authorization: Bearer <token>`) and for browsers: opening any page
with `?token=<token>` once sets an HttpOnly cookie holding an HMAC of the token (not the token),
then redirects to the same URL without it, so the token does not stay in history or server logs.
Secrets come from the environment, never from the command line, where `ps` would show them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlencode

from flask import Flask, Response, redirect, request

ENV_USER = "GAPWATCH_DASHBOARD_USER"
ENV_PASSWORD = "GAPWATCH_DASHBOARD_PASSWORD"
ENV_TOKEN = "GAPWATCH_DASHBOARD_TOKEN"
DEFAULT_USER = "gapwatch"
COOKIE = "gapwatch_session"
# Shorter secrets than this are guessable online; the check refuses them at start-up.
MIN_SECRET_LENGTH = 12
# Each wrong secret a client offers delays its next try this long, so one client guesses at most
# four times a second however many connections it opens; past MAX_WAIT_S of queued delay it is
# told to come back later (429) instead of holding a server thread.
FAILED_TRY_DELAY_S = 0.25
MAX_WAIT_S = 5.0
# Dash serves its scripts from this origin but starts its renderer from an inline script, and
# plotly.js compiles functions at run time: so 'unsafe-inline' and 'unsafe-eval' for scripts, and
# nothing from elsewhere, no plugins, no framing, no form posts away.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
                           "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
                           "worker-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
                           "form-action 'self'; frame-ancestors 'none'")


@dataclass(frozen=True)
class AuthConfig:
    """Who may read the dashboard. Neither secret set: no authentication (loopback only)."""

    username: str = DEFAULT_USER
    """User name for basic auth."""
    password: str | None = None
    """Basic-auth password ($GAPWATCH_DASHBOARD_PASSWORD)."""
    token: str | None = None
    """Bearer token ($GAPWATCH_DASHBOARD_TOKEN)."""

    @property
    def enabled(self) -> bool:
        return bool(self.password or self.token)

    @classmethod
    def from_env(cls, environ=os.environ) -> "AuthConfig":
        return cls(username=environ.get(ENV_USER) or DEFAULT_USER,
                   password=environ.get(ENV_PASSWORD) or None, token=environ.get(ENV_TOKEN) or None)

    def weak_secret(self) -> str | None:
        """The name of a secret that is set but too short, if any."""
        for name, value in ((ENV_PASSWORD, self.password), (ENV_TOKEN, self.token)):
            if value is not None and len(value) < MIN_SECRET_LENGTH:
                return name
        return None


def install(server: Flask, auth: AuthConfig, open_paths: tuple[str, ...] = ()) -> None:
    """Check every request against `auth` (when enabled), except to `open_paths` (probes that
    reveal nothing), and add protective headers to all."""
    session_key = secrets.token_bytes(32)  # per process: a restart logs browsers out, by design

    def session_value() -> str:
        return hmac.new(session_key, (auth.token or "").encode(), hashlib.sha256).hexdigest()

    def allowed() -> bool:
        if auth.token:
            header = request.headers.get("Authorization", "")
            if header.startswith("Bearer ") and _same(header[len("Bearer "):], auth.token):
                return True
            cookie = request.cookies.get(COOKIE)
            if cookie and _same(cookie, session_value()):
                return True
        if auth.password:
            creds = request.authorization
            if creds is not None and creds.type == "basic" and _same(creds.username or "", auth.username) \
                    and _same(creds.password or "", auth.password):
                return True
        return False

    throttle = FailedTries()

    @server.before_request
    def _authenticate():
        if not auth.enabled or request.path in open_paths:
            return None
        client = request.remote_addr or ""
        offered = request.args.get("token")
        guessing = offered is not None or "Authorization" in request.headers
        if guessing and not throttle.wait_turn(client):
            response = Response("too many wrong attempts: try again later\n", status=429, mimetype="text/plain")
            response.headers["Retry-After"] = str(int(MAX_WAIT_S))
            return response
        if auth.token and offered is not None and _same(offered, auth.token):
            throttle.forget(client)
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            response = redirect(request.path + (f"?{urlencode(rest)}" if rest else ""), code=303)
            response.set_cookie(COOKIE, session_value(), httponly=True, samesite="Strict", secure=request.is_secure)
            return response
        if allowed():
            if guessing:
                throttle.forget(client)
            return None
        if guessing:
            throttle.failed(client)
        response = Response("authentication required\n", status=401, mimetype="text/plain")
        if auth.password:
            response.headers["WWW-Authenticate"] = 'Basic realm="gapwatch", charset="UTF-8"'
        return response

    @server.after_request
    def _headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


class FailedTries:
    """Per client, the time its next try may be checked: each failure pushes it FAILED_TRY_DELAY_S
    later (parallel guesses queue behind each other), a success clears it."""

    def __init__(self) -> None:
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait_turn(self, client: str) -> bool:
        """Sleep until this client may try again; False when that is more than MAX_WAIT_S away."""
        with self._lock:
            at = self._next.get(client)
        wait = 0.0 if at is None else at - time.monotonic()
        if wait > MAX_WAIT_S:
            return False
        if wait > 0:
            time.sleep(wait)
        return True

    def failed(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._next) > 10_000:  # bounded memory under a flood of addresses
                self._next = {c: t for c, t in self._next.items() if t > now}
            self._next[client] = max(self._next.get(client, now), now) + FAILED_TRY_DELAY_S

    def forget(self, client: str) -> None:
        with self._lock:
            self._next.pop(client, None)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
