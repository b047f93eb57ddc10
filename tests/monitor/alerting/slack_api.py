"""A real HTTP server on 127.0.0.1 that answers as Slack's Web API does for the two methods a bot
sink calls (chat.postMessage, chat.update), keeping the messages it was sent, so a test can read
the channel as a person would. slack_sdk's WebClient talks to it through `base_url`."""

from __future__ import annotations

import json
import itertools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHANNEL_ID = "C0GAPWATCH"


class SlackApi:
    def __init__(self, token: str) -> None:
        self.token = token
        self.messages: dict[str, dict[str, Any]] = {}
        """By ts: channel, text, blocks, thread_ts (a reply) and how many times it was edited."""
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_with: tuple[int, str] | None = None
        """Answer every call with this HTTP status and Slack error until cleared."""
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                status, answer = api.answer(self.path.rsplit("/", 1)[-1], self.headers.get("Authorization"), body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                if status == 429:
                    self.send_header("Retry-After", "0.1")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/api/"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def answer(self, method: str, auth: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.calls.append((method, body))
            if self.fail_with is not None:
                status, error = self.fail_with
                return status, {"ok": False, "error": error}
            if auth != f"Bearer {self.token}":
                return 200, {"ok": False, "error": "invalid_auth"}
            if method == "chat.postMessage":
                ts = f"1700000000.{next(self._ts):06d}"
                self.messages[ts] = {"channel": CHANNEL_ID, "text": body.get("text"), "blocks": body.get("blocks"),
                                     "thread_ts": body.get("thread_ts"), "edits": 0}
                return 200, {"ok": True, "channel": CHANNEL_ID, "ts": ts}
            if method == "chat.update":
                message = self.messages.get(body.get("ts"))
                if message is None or body.get("channel") != CHANNEL_ID:
                    return 200, {"ok": False, "error": "message_not_found"}
                message.update(text=body.get("text"), blocks=body.get("blocks"), edits=message["edits"] + 1)
                return 200, {"ok": True, "channel": CHANNEL_ID, "ts": body["ts"]}
            return 200, {"ok": False, "error": "unknown_method"}

    def top_level(self) -> list[dict[str, Any]]:
        with self._lock:
            return [m for m in self.messages.values() if m["thread_ts"] is None]

    def replies(self, ts: str) -> list[dict[str, Any]]:
        with self._lock:
            return [m for m in self.messages.values() if m["thread_ts"] == ts]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
