"""A stand-in for the W&B GraphQL endpoint on 127.0.0.1: a real HTTP server that answers the
queries wandb's public API (and its core service) sends to read a run and page its history.

It holds runs in memory; tests append rows and change a run's state while a reader polls.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_OPERATION = re.compile(r"(?:query|mutation)\s+(\w+)")


@dataclass
class StandInRun:
    entity: str
    project: str
    run_id: str
    display_name: str
    config: dict
    summary: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    state: str = "running"
    # History pages as the server sends them (JSON text per row), in place of `rows`: what a
    # broken or hostile server answers. `rows` still gives the run's last step.
    raw_history: list[str] | None = None


class WandbStandIn:
    def __init__(self) -> None:
        self.runs: dict[tuple[str, str, str], StandInRun] = {}
        self.requests: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server API)
                body = self.rfile.read(int(self.headers.get("content-length", 0)) or 0)
                try:
                    query = json.loads(body or b"{}")
                except ValueError:
                    query = {}
                status, data = outer.answer(query)
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "WandbStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_run(self, run: StandInRun) -> StandInRun:
        self.runs[(run.entity, run.project, run.run_id)] = run
        return run

    def operations(self) -> list[str]:
        with self.lock:
            return [op for op, _ in self.requests]

    # --- the GraphQL answers ----------------------------------------------------------------------
    def answer(self, query: dict) -> tuple[int, dict]:
        text = query.get("query", "")
        m = _OPERATION.search(text)
        op = query.get("operationName") or (m.group(1) if m else "")
        variables = query.get("variables") or {}
        with self.lock:
            self.requests.append((op, variables))
        if op in ("Viewer", "GetDefaultEntity"):
            return 200, {"data": {"viewer": {
                "id": "VXNlcjox", "entity": "gapwatch", "username": "tester",
                "email": "tester@example.com", "flags": "{}", "teams": {"edges": []}}}}
        run = self.runs.get((variables.get("entity"), variables.get("project"),
                             variables.get("name") or variables.get("run")
                             or variables.get("runName")))
        if op in ("Run", "RunHistoryKeys", "RunParquetHistory", "HistoryPage") and run is None:
            return 200, {"data": {"project": {"run": None}}}
        last = max((r["_step"] for r in run.rows), default=-1) if run else -1
        if op == "Run":
            return 200, {"data": {"project": {"run": {
                "projectId": "1", "id": "UnVuOjE=", "tags": [], "name": run.run_id,
                "displayName": run.display_name, "sweepName": None, "state": run.state,
                "config": json.dumps({k: {"value": v, "desc": None}
                                      for k, v in run.config.items()}),
                "group": None, "jobType": None, "commit": None, "readOnly": False,
                "createdAt": "2026-01-01T00:00:00", "heartbeatAt": "2026-01-01T01:00:00",
                "description": None, "notes": None, "systemMetrics": "{}",
                "summaryMetrics": json.dumps(run.summary), "historyLineCount": len(run.rows),
                "user": {"name": "tester", "username": "tester"},
                "historyKeys": {"lastStep": last, "keys": {}},
            }}}}
        if op == "RunHistoryKeys":
            return 200, {"data": {"project": {"run": {"historyKeys": {"lastStep": last}}}}}
        if op == "RunParquetHistory":
            # No parquet export: wandb then pages the history with HistoryPage.
            return 200, {"data": {"project": {"run": {"parquetHistory": {
                "parquetUrls": [], "liveData": []}}}}}
        if op == "HistoryPage":
            lo, hi, size = variables["minStep"], variables["maxStep"], variables["pageSize"]
            if run.raw_history is not None:
                return 200, {"data": {"project": {"run": {"history": run.raw_history if lo == 0
                                                          else []}}}}
            page = [json.dumps(r) for r in run.rows if lo <= r["_step"] < hi][:size]
            return 200, {"data": {"project": {"run": {"history": page}}}}
        return 200, {"data": {}}
