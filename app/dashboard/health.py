"""`/healthz`: what a container orchestrator or load balancer polls to know the dashboard serves.

It answers 200 only when the store answers too (a dashboard that cannot read runs is not healthy),
with the schema version, and 503 with the reason otherwise. It needs no credentials, so the probe
works with auth on, and it says nothing about runs.
"""

from __future__ import annotations

from flask import Flask, jsonify
from monitor.store import Store, StoreError

PATH = "/healthz"


def install(server: Flask, store: Store) -> None:
    @server.get(PATH)
    def _healthz():
        try:
            version = store.schema_version()
        except StoreError as exc:
            return jsonify(status="unavailable", error=type(exc).__name__), 503
        return jsonify(status="ok", schema_version=version, backend=store.backend)
