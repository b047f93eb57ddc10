"""`--until-done`: run the training command again after a crash, with backoff, until it finishes.

The supervisor is a plain parent process: each attempt is a fresh child process that resumes from
the latest checkpoint, as a cluster scheduler would restart a job. A child that exits 0 has reached
its step budget. Exit code 2 is a user error (bad config, bad input): retrying cannot fix it, so
the supervisor stops at once.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

USER_ERROR_EXIT = 2  # app/cli.py's exit code for a GapwatchError


@dataclass(frozen=True)
class SupervisorConfig:
    """Restart policy."""

    max_restarts: int = 10
    """Restarts before giving up."""
    backoff_s: float = 1.0
    """Wait before the first restart."""
    backoff_factor: float = 2.0
    """Each further wait is this many times longer..."""
    max_backoff_s: float = 60.0
    """...up to this many seconds."""

    def delay(self, restart: int) -> float:
        return min(self.backoff_s * self.backoff_factor ** restart, self.max_backoff_s)


def exit_code(returncode: int) -> int:
    """A child killed by signal N reports -N; shells call that 128 + N (SIGKILL: 137)."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(command: list[str], config: SupervisorConfig = SupervisorConfig(),
              say: Callable[[str], None] = print,
              restart_flag: str = "--restart-exit-code") -> int:
    """Run `command` until it exits 0; after a crash run it again with `restart_flag CODE` appended."""
    restarts = 0
    last: int | None = None
    while True:
        argv = command if last is None else [*command, restart_flag, str(last)]
        child = subprocess.Popen(argv)
        try:
            returncode = child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            child.wait()
            raise
        code = exit_code(returncode)
        if code == 0:
            return 0
        if code == USER_ERROR_EXIT:
            say(f"train: stopped after a user error (exit code {code}); not restarting")
            return code
        if restarts >= config.max_restarts:
            say(f"train: exit code {code} after {restarts} restarts; giving up")
            return code
        wait = config.delay(restarts)
        restarts += 1
        say(f"train: process exited with code {code}; restart {restarts}/{config.max_restarts} "
            f"in {wait:.1f}s")
        time.sleep(wait)
        last = code
