"""The logging client's spool: batches the store has not taken yet, in append-only JSON-lines files.

A process appends to segment files named `<pid>-<token>-<seq>.jsonl`; the pid tells a live
writer's files from those a killed process left behind. Before a replay the current segment is
sealed (the next append opens a new one), so a replay never reads a file still being written.
Every append is fsynced: what the spool holds survives SIGKILL. A batch that can never be written
goes to `quarantine/` beside the segments, kept for a person to read, never replayed.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

from monitor.jsonutil import dumps
from monitor.schema import file_name

# A segment is read whole by a replay: past this size, appends go to a new one, so a long
# outage's spool is many files a replay can take one at a time.
SEGMENT_BYTES = 4 << 20


# Prefixes of this process's spools whose writer may still append: a later Monitor of the same
# run in this process must not replay (and remove) a segment another one is still writing.
_LIVE_HERE: set[str] = set()


class Spool:
    def __init__(self, root: Path, run: str) -> None:
        self.dir = Path(root) / file_name(run)
        self.quarantine_path = self.dir / "quarantine" / f"{os.getpid()}-{uuid.uuid4().hex}.jsonl"
        self._prefix = f"{os.getpid()}-{uuid.uuid4().hex}"
        _LIVE_HERE.add(self._prefix)
        self._seq = 0
        # The writer thread, a store job and close() may each append or seal.
        self._lock = threading.Lock()

    def _current(self) -> Path:
        return self.dir / f"{self._prefix}-{self._seq:06d}.jsonl"

    def append(self, batch: dict) -> None:
        """Make `batch` durable; raises OSError when the disk will not take it."""
        line = dumps(batch) + "\n"
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            current = self._current()
            if current.exists() and current.stat().st_size >= SEGMENT_BYTES:
                self._seq += 1
                current = self._current()
            _append_synced(current, line)

    def seal(self) -> None:
        """Close the current segment to appends, so a replay may read it whole."""
        with self._lock:
            if self._current().exists():
                self._seq += 1

    def release(self) -> None:
        """The writer is done: other spools of this process may replay what is left."""
        _LIVE_HERE.discard(self._prefix)

    def drop_written(self, written: set) -> None:
        """Remove this process's segments whose every batch the store has confirmed (slow writes
        spooled as well, then written): nothing in them is left to replay."""
        with self._lock:
            for path in self.dir.glob(f"{self._prefix}-*.jsonl") if self.dir.exists() else []:
                batches, bad = self.read(path)
                if not bad and all(b.get("id") in written for b in batches):
                    path.unlink(missing_ok=True)

    def holds_own(self) -> bool:
        """Any of this process's batches still waits here (close() says so)."""
        return self.dir.exists() and any(self.dir.glob(f"{self._prefix}-*.jsonl"))

    def is_own(self, path: Path) -> bool:
        return path.name.startswith(self._prefix + "-")

    def owner(self, path: Path) -> str:
        """The writing process's `<pid>-<token>`: segments of one process share an attempt."""
        return path.name.rsplit("-", 1)[0] if path.name.count("-") >= 2 else path.stem

    def pending(self) -> list[Path]:
        """Files to replay, oldest first: those of dead processes (earlier attempts than ours),
        then our own sealed segments. A live process's files are its own business."""
        if not self.dir.exists():
            return []
        current = self._current()
        mine, foreign = [], []
        for path in self.dir.glob("*.jsonl"):
            if self.is_own(path):
                if path != current:
                    mine.append(path)
            elif not _writer_alive(path):
                foreign.append(path)
        return sorted(foreign, key=_mtime) + sorted(mine)

    def has_pending(self) -> bool:
        """Anything to replay, this process's current segment included (a replay seals it)."""
        return self._current().exists() or bool(self.pending())

    @staticmethod
    def read(path: Path) -> tuple[list[dict], list[str]]:
        """The batches of a file, and the lines that are not a batch (kept for quarantine). A last
        line without its newline is one a killed writer left half-written: never fsynced, never
        confirmed, so it is skipped."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:  # an abandoned job replayed and removed it meanwhile
            return [], []
        batches, bad = [], []
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            try:
                batches.append(json.loads(line))
            except json.JSONDecodeError:
                bad.append(line)
        return batches, bad

    def quarantine(self, record: dict) -> Path:
        """Keep a batch that can never be written, with the reason, out of the replay's way."""
        line = dumps(record) + "\n"
        with self._lock:
            self.quarantine_path.parent.mkdir(parents=True, exist_ok=True)
            _append_synced(self.quarantine_path, line)
        return self.quarantine_path


def _append_synced(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()


def _writer_alive(spool: Path) -> bool:
    pid_text = spool.name.split("-", 1)[0]
    if not pid_text.isdigit():
        return False
    if int(pid_text) == os.getpid():
        return spool.name.rsplit("-", 1)[0] in _LIVE_HERE
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
