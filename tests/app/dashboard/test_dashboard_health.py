"""`/healthz` answers 200 only while the store answers, with auth on or off, and leaks no run."""

from __future__ import annotations

from app.dashboard.app import create_app
from app.dashboard.auth import AuthConfig
from monitor.store import open_store
from monitor.store.migrations import current_version


def test_healthy_store_answers_ok_with_its_schema_version_even_behind_auth(demo_url):
    with open_store(demo_url, read_only=True) as store:
        with store.engine.connect() as conn:
            version = current_version(conn)
        client = create_app(store, auth=AuthConfig(token="a-token-long-enough")).server.test_client()
        assert client.get("/").status_code == 401  # the probe's exemption opens nothing else
        response = client.get("/healthz")
        assert response.status_code == 200
        assert response.get_json() == {"status": "ok", "schema_version": version, "backend": "sqlite"}
        assert "olmo" not in response.get_data(as_text=True)


def test_a_store_that_cannot_be_read_makes_it_unhealthy(tmp_path):
    db = tmp_path / "gone.db"
    store = open_store(f"sqlite:///{db}")
    client = create_app(store).server.test_client()
    assert client.get("/healthz").status_code == 200
    store.engine.dispose()
    db.unlink()
    db.mkdir()  # a folder where the database file was: every new connection fails
    response = client.get("/healthz")
    assert response.status_code == 503 and response.get_json()["status"] == "unavailable"
    store.close()
