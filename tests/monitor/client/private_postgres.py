"""A PostgreSQL server of a test's (or a benchmark's) own, so it can be stopped without touching
anyone else's."""

from __future__ import annotations

import os
import subprocess


class PrivatePostgres:
    """initdb into a fresh folder under /tmp, on a free loopback port; start() and stop() it."""

    BIN = "/usr/lib/postgresql/15/bin"

    def __init__(self) -> None:
        import socket
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="gapwatch-pg-", dir="/tmp")
        os.chmod(self.dir, 0o777)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._as_postgres(f"{self.BIN}/initdb", "-D", f"{self.dir}/data", "-A", "trust", "-U", "postgres")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *cmd: str) -> None:
        # initdb refuses to run as root; the cluster belongs to the postgres user.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(prefix + list(cmd), check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._as_postgres(f"{self.BIN}/pg_ctl", "-D", f"{self.dir}/data", "-w", "-l", f"{self.dir}/log",
                          "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1", "start")

    def stop(self) -> None:
        self._as_postgres(f"{self.BIN}/pg_ctl", "-D", f"{self.dir}/data", "-w", "-m", "fast", "stop")
