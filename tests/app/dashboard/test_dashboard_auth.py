"""Authentication and the bind rule, through Flask's test client against the real app."""

from __future__ import annotations

import base64
import time

import pytest

from app.dashboard.app import create_app
from app.dashboard.auth import COOKIE, FAILED_TRY_DELAY_S, MAX_WAIT_S, AuthConfig, FailedTries
from app.dashboard.server import check_bind, is_loopback
from monitor.errors import GapwatchError
from monitor.store import open_store

TOKEN = "a-token-long-enough"
PASSWORD = "a-password-long-enough"


@pytest.fixture
def client_for(demo_url):
    stores = []

    def make(auth: AuthConfig):
        store = open_store(demo_url, read_only=True)
        stores.append(store)
        return create_app(store, auth=auth).server.test_client()

    yield make
    for store in stores:
        store.close()


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_no_authentication_configured_serves_everyone(client_for):
    response = client_for(AuthConfig()).get("/")
    assert response.status_code == 200
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_token_by_header_or_by_link_then_cookie(client_for):
    client = client_for(AuthConfig(token=TOKEN))
    for path in ("/", "/_dash-layout", "/_dash-dependencies", "/run/olmo-repro"):
        assert client.get(path).status_code == 401
    assert "WWW-Authenticate" not in client.get("/").headers  # no basic auth offered
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/_dash-layout", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    redirect = client.get(f"/run/olmo-repro?token={TOKEN}&start=5")
    assert redirect.status_code == 303 and redirect.headers["Location"] == "/run/olmo-repro?start=5"
    cookie = client.get_cookie(COOKIE)
    assert cookie is not None and cookie.value != TOKEN and cookie.http_only
    assert client.get("/_dash-layout").status_code == 200  # the cookie now authenticates


def test_session_cookie_of_another_server_process_is_refused(client_for):
    first, second = client_for(AuthConfig(token=TOKEN)), client_for(AuthConfig(token=TOKEN))
    first.get(f"/?token={TOKEN}")
    second.set_cookie(COOKIE, first.get_cookie(COOKIE).value)
    assert second.get("/_dash-layout").status_code == 401


def test_basic_auth(client_for):
    client = client_for(AuthConfig(username="ann", password=PASSWORD))
    denied = client.get("/")
    assert denied.status_code == 401 and denied.headers["WWW-Authenticate"].startswith('Basic realm="gapwatch"')
    assert client.get("/", headers=basic("ann", "wrong")).status_code == 401
    assert client.get("/", headers=basic("bob", PASSWORD)).status_code == 401
    assert client.get("/", headers=basic("ann", PASSWORD)).status_code == 200


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                            ("localhost", True), ("0.0.0.0", False), ("::", False),
                                            ("192.168.1.5", False), ("dash.example.org", False)])
def test_loopback_detection(host, loopback):
    assert is_loopback(host) is loopback


def test_bind_rule():
    check_bind("127.0.0.1", AuthConfig())
    with pytest.raises(GapwatchError, match="refusing to serve on 0.0.0.0 without authentication"):
        check_bind("0.0.0.0", AuthConfig())
    check_bind("0.0.0.0", AuthConfig(token=TOKEN))
    check_bind("0.0.0.0", AuthConfig(password=PASSWORD))
    with pytest.raises(GapwatchError, match="GAPWATCH_DASHBOARD_TOKEN is shorter than 12"):
        check_bind("0.0.0.0", AuthConfig(token="short"))


def test_auth_config_from_environment():
    auth = AuthConfig.from_env({"GAPWATCH_DASHBOARD_PASSWORD": PASSWORD, "GAPWATCH_DASHBOARD_USER": "ann"})
    assert auth.enabled and auth.username == "ann" and auth.token is None
    assert not AuthConfig.from_env({"GAPWATCH_DASHBOARD_TOKEN": ""}).enabled


def test_every_response_carries_a_content_security_policy(client_for):
    policy = client_for(AuthConfig()).get("/").headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "object-src 'none'" in policy


def test_wrong_tokens_slow_their_client_down(client_for):
    client = client_for(AuthConfig(token=TOKEN))
    began = time.monotonic()
    codes = [client.get("/", headers={"Authorization": f"Bearer wrong{i}"}).status_code for i in range(8)]
    assert codes == [401] * 8
    assert time.monotonic() - began >= 7 * FAILED_TRY_DELAY_S, "each wrong guess waited for the one before"
    # The right token still gets in, after the wait its client's last failure earned, and clears it.
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    began = time.monotonic()
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert time.monotonic() - began < FAILED_TRY_DELAY_S


def test_guesses_queued_far_ahead_are_turned_away_without_waiting():
    """Parallel connections from one client queue behind each other until the queue is longer
    than MAX_WAIT_S; then the client is told to come back later. Other clients are not affected."""
    tries = FailedTries()
    for _ in range(int(MAX_WAIT_S / FAILED_TRY_DELAY_S) + 2):
        tries.failed("10.0.0.9")
    began = time.monotonic()
    assert not tries.wait_turn("10.0.0.9")
    assert tries.wait_turn("10.0.0.10")
    assert time.monotonic() - began < FAILED_TRY_DELAY_S
