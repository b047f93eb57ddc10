"""A loopback TCP proxy that can freeze traffic while keeping every socket open: a network
partition as a client sees it (no reset, no error, no answer), which a stopped server is not.

While frozen, bytes already read are held and nothing more is forwarded in either direction; new
connections are accepted and held too. Thawing forwards everything held, in order.
"""

from __future__ import annotations

import socket
import threading


class PartitionProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thawed = threading.Event()
        self._thawed.set()
        self._stopped = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="partition-proxy", daemon=True).start()

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    def stop(self) -> None:
        self._stopped = True
        self._thawed.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in [self._listener, *sockets]:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> "PartitionProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _keep(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.append(s)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._thawed.wait()  # a connection made during a partition hangs like any other
        try:
            server = socket.create_connection(self.upstream, timeout=10)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        self._keep(server)
        threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                self._thawed.wait()
                data = src.recv(65536)
                if not data:
                    break
                self._thawed.wait()  # read before the freeze, held until the thaw
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
