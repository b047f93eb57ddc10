"""A real HTTP receiver on 127.0.0.1 that records every request and fails on command.

It plays Slack (answers `ok`) or any JSON webhook. Modes: ok, fail with a status (500, 404...),
429 with a Retry-After header (whole or fractional seconds), hang (longer than the client's timeout,
then 503), and down (the socket is closed: connection refused). A request counts as a delivery
only when it was answered 2xx; every wait here is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Longest any helper here waits for something before failing the test.
WAIT_LIMIT_S = 60.0


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any
    status: int
    at: float = field(default_factory=time.time)

    @property
    def key(self) -> str | None:
        return self.headers.get("Idempotency-Key")


@dataclass
class Mode:
    status: int = 200
    body: str = "ok"
    retry_after: str | None = None
    hang_s: float = 0.0
    echo: Any = None
    """A function of the request's path whose result is the answer's body (a server that echoes
    the URL it was called on, in its own spelling)."""
    kill_pid: int | None = None
    """Accept the request (as Slack would: the message is posted), then SIGKILL this process before
    answering: the sender dies between the receiver's success and its own bookkeeping."""


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.mode = Mode()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.start()

    # --- control -------------------------------------------------------------------------------
    def start(self) -> None:
        """Listen (again, on the same port after `down()`)."""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                mode = receiver.mode
                status = mode.status
                if mode.hang_s:
                    receiver._released.wait(mode.hang_s)
                    status = 503
                with receiver._lock:
                    receiver.requests.append(Recorded(self.path, dict(self.headers), body, status))
                if mode.kill_pid is not None:
                    os.kill(mode.kill_pid, signal.SIGKILL)
                    receiver.mode = Mode(status=503, body="sender is dead")
                    return
                text = mode.echo(self.path) if mode.echo is not None else mode.body
                payload = (text if status != 503 or not mode.hang_s else "hung").encode()
                try:
                    self.send_response(status)
                    if status == 429 and mode.retry_after is not None:
                        self.send_header("Retry-After", mode.retry_after)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            def log_message(self, *args) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._released.clear()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Close the socket: clients now get `connection refused`."""
        if self._server is not None:
            self._released.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def ok(self) -> None:
        self.mode = Mode()

    def fail(self, status: int, body: str = "rollup_error", retry_after: str | None = None) -> None:
        self.mode = Mode(status=status, body=body, retry_after=retry_after)

    def echo(self, status: int, spell) -> None:
        """Answer `status` with a body of `spell(path)`: the URL called, spelled the server's way."""
        self.mode = Mode(status=status, echo=spell)

    def hang(self, seconds: float) -> None:
        self.mode = Mode(hang_s=seconds)

    def accept_then_kill(self, pid: int) -> None:
        self.mode = Mode(kill_pid=pid)

    def close(self) -> None:
        self.down()

    # --- what arrived -------------------------------------------------------------------------
    def url(self, path: str = "/hook/T0000/B0000/s3cr3tT0kenValue") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def all(self) -> list[Recorded]:
        with self._lock:
            return list(self.requests)

    def deliveries(self) -> list[Recorded]:
        return [r for r in self.all() if 200 <= r.status < 300]

    def wait_for(self, predicate, timeout: float = 10.0) -> None:
        """Poll until `predicate(self)` holds; fail after `timeout` seconds (at most WAIT_LIMIT_S)."""
        deadline = time.monotonic() + min(timeout, WAIT_LIMIT_S)
        while time.monotonic() < deadline:
            if predicate(self):
                return
            time.sleep(0.02)
        raise AssertionError(f"receiver: condition not met within {timeout} s; got {len(self.all())} requests")
