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

    @server.before_request
    def _authenticate():
        if not auth.enabled or request.path in open_paths:
            return None
        offered = request.args.get("token")
        if auth.token and offered is not None and _same(offered, auth.token):
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            response = redirect(request.path + (f"?{urlencode(rest)}" if rest else ""), code=303)
            response.set_cookie(COOKIE, session_value(), httponly=True, samesite="Strict", secure=request.is_secure)
            return response
        if allowed():
            return None
        response = Response("authentication required\n", status=401, mimetype="text/plain")
        if auth.password:
            response.headers["WWW-Authenticate"] = 'Basic realm="gapwatch", charset="UTF-8"'
        return response

    @server.after_request
    def _headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
