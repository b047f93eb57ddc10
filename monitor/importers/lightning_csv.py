"""Lightning's CSVLogger folders: a version folder, or the folder of its versions.

CSVLogger writes each launch to `<save_dir>/<name>/version_N/`: `metrics.csv`, with the run's
hyperparameters beside it as `hparams.yaml` (read by `hparams_file`). A launch resumed in a new
process (`Trainer.fit(ckpt_path=...)`) gets the next N. So, as TensorBoard's launch folders are
read (`tensorboard_events`):
* a version folder is its `metrics.csv`;
* a folder of versions is one run when, in the order they were started (N), each later one begins
  above the step the first began at: a job resumed from its checkpoints, whose logs are read one
  after the other, a step that goes back being a restart (`logged_rows`);
* versions that each begin where the first did (a sweep, a run started again from scratch) are
  refused with their names: each is imported from its own folder.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from monitor.errors import GapwatchError

from .generic_rows import step_field
from .imported_run import resumed_launches

METRICS_FILE = "metrics.csv"
_VERSION = re.compile(r"version_([0-9]+)")
_LISTED = 10  # versions named in a refusal


def holds_logs(folder: Path) -> bool:
    """Whether a folder is a version folder of CSVLogger's or holds some (for detection)."""
    return bool(_version_logs(folder))


def run_logs(folder: Path, step_key: str | None = None) -> list[Path]:
    """The metrics.csv files of one run in a CSVLogger folder, in the order they were written.

    step_key: the column that holds the step (default: `generic_rows.step_field`'s)."""
    logs = _version_logs(folder)
    if not logs:
        raise GapwatchError(f"{folder}: no {METRICS_FILE} in this folder nor in its version_N folders")
    if len(logs) > 1 and not resumed_launches([_first_step(f, step_key) for f in logs]):
        listed = ", ".join(f.parent.name for f in logs[:_LISTED]) + (" ..." if len(logs) > _LISTED else "")
        raise GapwatchError(f"{folder}: a Lightning CSVLogger folder of {len(logs)} runs ({listed}) that "
                            f"are not one run resumed: import one run from its own folder, such as "
                            f"{logs[0].parent}")
    return logs


def _version_logs(folder: Path) -> list[Path]:
    """The folder's own metrics.csv, else those of its version_N folders by N."""
    own = folder / METRICS_FILE
    if own.is_file():
        return [own]
    try:
        subfolders = list(folder.iterdir())
    except OSError as exc:
        raise GapwatchError(f"{folder}: cannot read: {exc.strerror}") from None
    # N compared as digits, never made an int: a name of thousands of digits is no crash.
    versions = sorted(((len(n := m.group(1).lstrip("0")), n), sub / METRICS_FILE) for sub in subfolders
                      if (m := _VERSION.fullmatch(sub.name)) and (sub / METRICS_FILE).is_file())
    return [log for _, log in versions]


def _first_step(log: Path, step_key: str | None) -> int | None:
    """The step of a log's first row, or None when it cannot be read here (the import says why)."""
    try:
        with open(log, encoding="utf-8", newline="") as fh:
            rows = csv.reader(fh)
            header = [h.strip() for h in next(rows, [])]
            field = step_field(header, step_key)
            if field is None:
                return None
            at = header.index(field)
            first = next((row[at].strip() for row in rows if len(row) > at and row[at].strip()), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    try:
        return int(first) if first is not None else None
    except ValueError:
        return None


__all__ = ["METRICS_FILE", "holds_logs", "run_logs"]
